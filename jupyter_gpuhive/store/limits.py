"""Stored fair-share limits, and what a user holds, read inside a booking's transaction.

`lock_owner` serializes the bookings of one user: on PostgreSQL a transaction-scoped
advisory lock on a hash of the user name (taken before anything is read, so two bookings
of one user never both pass a limit on what they read), on SQLite nothing is needed: every
write transaction is BEGIN IMMEDIATE, so writers take turns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.dialects import postgresql, sqlite

from ..model.jobs import ACTIVE
from ..model.limits import Limits, LimitTable, Tier
from .database import Database
from .schema import (
    booking_limits,
    job_tasks,
    jobs,
    reservation_gpus,
    reservation_stats,
    reservations,
)

SCOPES = ("default", "group", "user", "tiers")
_LOCK_SPACE = 0x67687368  # the first key of gpuhive's per-user advisory locks ('ghsh')


@dataclass(frozen=True)
class Held:
    """One thing a user holds: a reservation (its id) or a queued job (`job`), GPUs × span."""

    start: datetime
    end: datetime
    gpus: int
    reservation: int | None = None
    job: int | None = None


def _key(owner: str) -> int:
    digest = hashlib.sha256(owner.encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


class LimitStore:
    """The limits admins stored (over those in configuration), and users' holdings."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- limits ------------------------------------------------------------------------

    def read(self, conn: Connection | None = None) -> tuple[LimitTable, bool]:
        """The stored table, and whether tiers were stored (an empty list included)."""
        if conn is None:
            with self.db.read() as own:
                return self.read(own)
        rows = conn.execute(select(booking_limits.c.scope, booking_limits.c.name,
                                   booking_limits.c.spec)).all()  # fmt: skip
        default, groups, users = Limits(), {}, {}
        tiers: tuple[Tier, ...] = ()
        tiers_set = False
        for scope, name, spec in rows:
            data = json.loads(spec)
            if scope == "tiers":
                tiers, tiers_set = tuple(Tier.parse(t) for t in data), True
            elif scope == "default":
                default = Limits.parse(data)
            elif scope == "group":
                groups[name] = Limits.parse(data)
            elif scope == "user":
                users[name] = Limits.parse(data)
        return LimitTable(default, groups, users, tiers), tiers_set

    def put(self, scope: str, name: str, spec: Any, by: str, at: datetime) -> None:
        """Store one scope's entry (limits JSON, or the tiers list), replacing the old one."""
        assert scope in SCOPES
        values = {"scope": scope, "name": name, "spec": json.dumps(spec), "updated_by": by,
                  "updated_at": at}  # fmt: skip

        def work(conn: Connection) -> None:
            insert_ = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            stmt = insert_(booking_limits).values(**values)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["scope", "name"],
                    set_={k: stmt.excluded[k] for k in ("spec", "updated_by", "updated_at")},
                )
            )

        self.db.write(work)

    def remove(self, scope: str, name: str) -> bool:
        """Forget one scope's stored entry; whether there was one."""
        b = booking_limits

        def work(conn: Connection) -> bool:
            done = conn.execute(delete(b).where(b.c.scope == scope, b.c.name == name))
            return bool(done.rowcount)

        return self.db.write(work)

    # --- inside a booking's transaction -------------------------------------------------

    @staticmethod
    def lock_owner(conn: Connection, owner: str) -> None:
        """Serialize the bookings of `owner` until this transaction ends."""
        if conn.dialect.name == "postgresql":
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:space, :key)"),
                {"space": _LOCK_SPACE, "key": _key(owner)},
            )

    @staticmethod
    def holdings(conn: Connection, owner: str, since: datetime, now: datetime) -> list[Held]:
        """What `owner` holds that ends after `since`: reservations, and queued jobs that
        run or ran (from their start to their walltime's end, or to when they ended)."""
        r, rg = reservations, reservation_gpus
        longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
        query = (
            select(r.c.id, r.c.start_at, r.c.end_at, func.count(rg.c.gpu_id))
            .join(rg, rg.c.reservation_id == r.c.id)
            .where(
                r.c.owner == owner,
                r.c.cancelled_at.is_(None),
                r.c.start_at > since - timedelta(seconds=longest + 1),
                r.c.end_at > since,
            )
            .group_by(r.c.id, r.c.start_at, r.c.end_at)
        )
        rows = conn.execute(query).all()
        held = [Held(start, end, int(n), reservation=rid) for rid, start, end, n in rows]
        held.extend(_queued(conn, owner, since, now))
        return held


def _queued(conn: Connection, owner: str, since: datetime, now: datetime) -> Iterable[Held]:
    """Queued jobs of `owner` that run, or ran after `since`: one span per job."""
    j, t = jobs, job_tasks
    rows = conn.execute(
        select(j.c.id, j.c.walltime_s, t.c.state, t.c.gpus, t.c.started_at, t.c.ended_at)
        .join(t, t.c.job_id == j.c.id)
        .where(
            j.c.owner == owner,
            j.c.queued.is_(True),
            t.c.started_at.is_not(None),
            (t.c.state.in_([str(s) for s in ACTIVE])) | (t.c.ended_at > since),
        )
    ).all()
    spans: dict[int, list[Any]] = {}
    for job_id, walltime, state, gpus, started, ended in rows:
        if state in ACTIVE:
            end = started + timedelta(seconds=walltime) if walltime else now
            end = max(end, now)
        else:
            end = ended or now
        span = spans.setdefault(job_id, [started, end, 0])
        span[0], span[1] = min(span[0], started), max(span[1], end)
        span[2] += len(json.loads(gpus))
    return [Held(a, b, n, job=job_id) for job_id, (a, b, n) in spans.items() if b > since]
