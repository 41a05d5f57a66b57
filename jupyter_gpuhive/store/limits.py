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

from sqlalchemy import Connection, bindparam, delete, func, select, text
from sqlalchemy.dialects import postgresql, sqlite

from ..model.jobs import ACTIVE
from ..model.limits import Limits, LimitTable, Tier
from ..model.rules import Rule
from ..model.shares import fraction
from .budgets import BudgetReads
from .database import Database
from .hostgroups import read_group_limits
from .rules import read_rules
from .schema import (
    booking_limits,
    gpus,
    hosts,
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
    """One thing a user holds: a reservation (its id) or a queued job (`job`), GPUs × span;
    a share of a GPU counts its part of it (0.25 GPUs)."""

    start: datetime
    end: datetime
    gpus: float
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

    def read(self, user: str | None = None, groups: Iterable[str] = ()) -> tuple[LimitTable, bool]:
        """The stored table, and whether tiers were stored (an empty list included). With
        `user`, only the entries that can apply to them (default, theirs, their groups')."""
        with self.db.read() as conn:
            return LimitReads(conn).entries(user, groups)

    def holdings(self, owner: str, since: datetime, until: datetime, now: datetime) -> list[Held]:
        """What `owner` holds overlapping [since, until), one `Held` per reservation."""
        with self.db.read() as conn:
            return LimitReads(conn).holdings(owner, since, until, now)

    def on_groups(
        self, owner: str, on: Iterable[str], since: datetime, until: datetime, now: datetime
    ) -> list[Held]:
        """What `owner` holds on the hosts `on`, one `Held` per reservation (a host group's
        limits lowered below it: flags)."""
        with self.db.read() as conn:
            return LimitReads(conn).holdings_on(owner, on, since, until, now, merged=False)

    def group_limits(self) -> dict[str, Limits]:
        with self.db.read() as conn:
            return read_group_limits(conn)

    def standing(
        self, owner: str, since: datetime, until: datetime, now: datetime, *, merged: bool = False
    ) -> tuple[list[Held], int]:
        """What `owner` holds overlapping [since, until), and how many reservations of theirs
        have not ended, read together (see `LimitReads.holdings` for `merged`)."""
        with self.db.read() as conn:
            reads = LimitReads(conn)
            held = reads.holdings(owner, since, until, now, merged=merged)
            return held, reads.upcoming(owner, now)

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


class LimitReads:
    """The limit reads of one open transaction: what a booking's guard is given (it never
    sees the connection), so that the check reads what the write then stores."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def access_rules(self) -> list[Rule]:
        """Every access rule (a booking's access check, in the booking's transaction)."""
        return read_rules(self._conn)

    def entries(
        self, user: str | None = None, groups: Iterable[str] = ()
    ) -> tuple[LimitTable, bool]:
        """The stored table and whether tiers were stored (see `LimitStore.read`)."""
        conn = self._conn
        if user is None:
            rows = conn.execute(_ALL_ENTRIES).all()
        else:
            rows = conn.execute(_ENTRIES_FOR, {"user": user, "groups": list(groups)}).all()
        default, by_group, by_user = Limits(), {}, {}
        tiers: tuple[Tier, ...] = ()
        tiers_set = False
        for scope, name, spec in rows:
            data = json.loads(spec)
            if scope == "tiers":
                tiers, tiers_set = tuple(Tier.parse(t) for t in data), True
            elif scope == "default":
                default = Limits.parse(data)
            elif scope == "group":
                by_group[name] = Limits.parse(data)
            elif scope == "user":
                by_user[name] = Limits.parse(data)
        return LimitTable(default, by_group, by_user, tiers), tiers_set

    def budgets(self) -> BudgetReads:
        """The budget reads of this transaction (a booking's budget check)."""
        return BudgetReads(self._conn)

    def lock_owner(self, owner: str) -> None:
        """Serialize the bookings of `owner` until this transaction ends."""
        if self._conn.dialect.name == "postgresql":
            self._conn.execute(
                text("SELECT pg_advisory_xact_lock(:space, :key)"),
                {"space": _LOCK_SPACE, "key": _key(owner)},
            )

    def holdings(
        self,
        owner: str,
        since: datetime,
        until: datetime,
        now: datetime,
        *,
        merged: bool = False,
        exclude: int | None = None,
    ) -> list[Held]:
        """What `owner` holds overlapping [since, until): reservations, and queued jobs that
        run or ran (from their start to their walltime's end, or to when they ended).

        `merged`: reservations with the same span come as one `Held` with their GPUs summed
        and no id (what a booking's check needs: a user's many bookings of one slot cost one
        row, not one each); `exclude`: leave out that reservation (the one being edited)."""
        conn = self._conn
        longest = conn.execute(_LONGEST).scalar() or 0
        values = {"owner": owner, "since": since, "until": until, "exclude": exclude or 0,
                  "earliest": since - timedelta(seconds=longest + 1)}  # fmt: skip
        if merged:
            merged_rows = conn.execute(_HELD_MERGED, values).all()
            held = [Held(start, end, fraction(int(n))) for start, end, n in merged_rows]
        else:
            rows = conn.execute(_HELD, values).all()
            held = [
                Held(start, end, fraction(int(n)), reservation=rid) for rid, start, end, n in rows
            ]
        held.extend(_queued(conn, owner, since, until, now))
        return held

    def upcoming(self, owner: str, now: datetime) -> int:
        """How many reservations of `owner` have not ended."""
        found = self._conn.execute(_UPCOMING, {"owner": owner, "now": now})  # a partial index
        return int(found.scalar() or 0)

    # --- on a host group's hosts (the limits its administrators set) -------------------

    def group_limits(self) -> dict[str, Limits]:
        """The limits each host group set for its hosts."""
        return read_group_limits(self._conn)

    def hosts_of(self, gpu_ids: Iterable[int]) -> dict[int, str]:
        """The host of each of these GPUs, by GPU id."""
        rows = self._conn.execute(_GPU_HOSTS, {"ids": sorted(set(gpu_ids))}).all()
        return {gpu_id: host for gpu_id, host in rows}

    def holdings_on(
        self,
        owner: str,
        on: Iterable[str],
        since: datetime,
        until: datetime,
        now: datetime,
        exclude: int | None = None,
        *,
        merged: bool = True,
    ) -> list[Held]:
        """What `owner` holds on the hosts `on` overlapping [since, until): their
        reservations' GPUs there (`merged`: by span, else one `Held` per reservation), and
        their queued jobs' tasks there."""
        conn, names = self._conn, sorted(set(on))
        longest = conn.execute(_LONGEST).scalar() or 0
        values = {"owner": owner, "since": since, "until": until, "exclude": exclude or 0,
                  "earliest": since - timedelta(seconds=longest + 1), "hosts": names}  # fmt: skip
        if merged:
            rows = conn.execute(_HELD_MERGED_ON, values).all()
            held = [Held(start, end, fraction(int(n))) for start, end, n in rows]
        else:
            each = conn.execute(_HELD_ON, values).all()
            held = [Held(a, b, fraction(int(n)), reservation=rid) for rid, a, b, n in each]
        held.extend(_queued(conn, owner, since, until, now, names))
        return held

    def upcoming_on(self, owner: str, on: Iterable[str], now: datetime) -> int:
        """How many reservations of `owner` on the hosts `on` have not ended."""
        values = {"owner": owner, "now": now, "hosts": sorted(set(on))}
        return int(self._conn.execute(_UPCOMING_ON, values).scalar() or 0)


# The statements of a booking's check, built once (the check runs in every booking).
_b = booking_limits
_ALL_ENTRIES = select(_b.c.scope, _b.c.name, _b.c.spec)
_ENTRIES_FOR = _ALL_ENTRIES.where(
    _b.c.scope.in_(("default", "tiers"))
    | ((_b.c.scope == "user") & (_b.c.name == bindparam("user")))
    | ((_b.c.scope == "group") & _b.c.name.in_(bindparam("groups", expanding=True)))
)
_r, _rg = reservations, reservation_gpus
_LONGEST = select(reservation_stats.c.longest_seconds)
_HELD_WHERE = (
    _r.c.owner == bindparam("owner"),
    _r.c.cancelled_at.is_(None),
    _r.c.start_at > bindparam("earliest"),
    _r.c.start_at < bindparam("until"),
    _r.c.end_at > bindparam("since"),
    _r.c.id != bindparam("exclude"),
)
# the GPUs held, in millionths: a share counts its part
_HELD = (
    select(_r.c.id, _r.c.start_at, _r.c.end_at, func.sum(_rg.c.share_ppm))
    .join(_rg, _rg.c.reservation_id == _r.c.id)
    .where(*_HELD_WHERE)
    .group_by(_r.c.id, _r.c.start_at, _r.c.end_at)
)
_HELD_MERGED = (
    select(_r.c.start_at, _r.c.end_at, func.sum(_rg.c.share_ppm))
    .join(_rg, _rg.c.reservation_id == _r.c.id)
    .where(*_HELD_WHERE)
    .group_by(_r.c.start_at, _r.c.end_at)
)
_UPCOMING = select(func.count()).where(
    _r.c.owner == bindparam("owner"),
    _r.c.cancelled_at.is_(None),
    _r.c.end_at > bindparam("now"),
)
_GPU_HOSTS = (
    select(gpus.c.id, hosts.c.name)
    .join(hosts, hosts.c.id == gpus.c.host_id)
    .where(gpus.c.id.in_(bindparam("ids", expanding=True)))
)
_ON_HOSTS = _rg.c.gpu_id.in_(
    select(gpus.c.id)
    .join(hosts, hosts.c.id == gpus.c.host_id)
    .where(hosts.c.name.in_(bindparam("hosts", expanding=True)))
)
_HELD_MERGED_ON = _HELD_MERGED.where(_ON_HOSTS)
_HELD_ON = _HELD.where(_ON_HOSTS)
_UPCOMING_ON = (
    select(func.count(func.distinct(_r.c.id)))
    .select_from(_r.join(_rg, _rg.c.reservation_id == _r.c.id))
    .where(
        _r.c.owner == bindparam("owner"),
        _r.c.cancelled_at.is_(None),
        _r.c.end_at > bindparam("now"),
        _ON_HOSTS,
    )
)
_j, _t = jobs, job_tasks
_QUEUED = (
    select(
        _j.c.id, _j.c.walltime_s, _t.c.state, _t.c.gpus, _t.c.started_at, _t.c.ended_at, _t.c.host
    )
    .join(_t, _t.c.job_id == _j.c.id)
    .where(
        _j.c.owner == bindparam("owner"),
        _j.c.queued.is_(True),
        _t.c.started_at.is_not(None),
        _t.c.started_at < bindparam("until"),
        _t.c.state.in_([str(s) for s in ACTIVE]) | (_t.c.ended_at > bindparam("since")),
    )
)


def _queued(
    conn: Connection,
    owner: str,
    since: datetime,
    until: datetime,
    now: datetime,
    on: Iterable[str] | None = None,
) -> Iterable[Held]:
    """Queued jobs of `owner` that run, or ran after `since`: one span per job (`on`:
    only their tasks on these hosts)."""
    rows = conn.execute(_QUEUED, {"owner": owner, "since": since, "until": until}).all()
    wanted = None if on is None else set(on)
    spans: dict[int, list[Any]] = {}
    for job_id, walltime, state, uuids, started, ended, host in rows:
        if wanted is not None and host not in wanted:
            continue
        if state in ACTIVE:
            end = started + timedelta(seconds=walltime) if walltime else now
            end = max(end, now)
        else:
            end = ended or now
        span = spans.setdefault(job_id, [started, end, 0])
        span[0], span[1] = min(span[0], started), max(span[1], end)
        span[2] += len(json.loads(uuids))
    return [Held(a, b, n, job=job_id) for job_id, (a, b, n) in spans.items() if b > since]
