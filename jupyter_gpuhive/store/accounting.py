"""Accounting rows: GPU time, use and energy charged per GPU, hour, month, payer and kind;
totals per reservation and job; and the reads the usage score and the report make."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite

from ..model.jobs import ACTIVE
from ..model.shares import fraction
from .database import Database
from .schema import (
    charge_totals,
    gpu_charges_hourly,
    gpu_charges_monthly,
    gpus,
    host_charges_monthly,
    job_tasks,
    jobs,
    payer_charges_monthly,
    reservation_gpus,
    reservation_stats,
    reservations,
    violations,
)

# What a charge is for: a reservation's GPU (charged to its holder), a queued job outside
# reservations, another gpuhive job outside them, other processes, or nothing (payer '').
RESERVED, QUEUED, JOB, UNRESERVED, IDLE = "reserved", "queued", "job", "unreserved", "idle"
KINDS = (RESERVED, QUEUED, JOB, UNRESERVED, IDLE)
FIGURES = ("seconds", "used_seconds", "util_seconds", "energy_j", "unmetered_seconds",
           "unrated_seconds")  # fmt: skip


@dataclass(frozen=True)
class Charge:
    """What one GPU did over one sample interval, charged to one payer."""

    gpu_id: int
    hour: datetime
    month: datetime
    payer: str
    kind: str
    seconds: float
    used_seconds: float = 0.0
    util_seconds: float = 0.0
    energy_j: float = 0.0
    unmetered_seconds: float = 0.0
    unrated_seconds: float = 0.0  # no utilisation reported (a GPU in MIG mode)
    subjects: tuple[tuple[str, int], ...] = ()  # ('reservation' | 'job', id)

    def figures(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in FIGURES}


@dataclass(frozen=True)
class RunningTask:
    """A job task that holds GPUs now: its job, owner, whether queued, and GPU UUIDs."""

    job_id: int
    owner: str
    queued: bool
    gpus: tuple[str, ...]


@dataclass(frozen=True)
class Booked:
    """One booked GPU of a reservation (cancelled ones left out)."""

    owner: str
    start: datetime
    end: datetime
    gpu_id: int
    slice: bool = False  # a MIG slice: the driver reports no utilisation of its own
    share: float = 1.0  # the share of the GPU held (a quarter GPU for 4 h is 1 GPU-hour)


def _add(conn: Connection, table: Table, keys: Sequence[str], rows: list[dict[str, Any]]) -> None:
    """Insert rows, or add their figures to the rows already there (one statement)."""
    if not rows:
        return
    insert_ = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert_(table)
    summed = {name: table.c[name] + stmt.excluded[name] for name in FIGURES}
    conn.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=summed), rows)


def _merge(rows: Iterable[tuple[tuple[Any, ...], dict[str, float]]]) -> dict[Any, dict[str, float]]:
    merged: dict[Any, dict[str, float]] = {}
    for key, figures in rows:
        into = merged.setdefault(key, dict.fromkeys(FIGURES, 0.0))
        for name, value in figures.items():
            into[name] += value
    return merged


class Accounting:
    """Writes the charges of each sweep; answers the score's and the report's questions."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._host_of: dict[int, int] = {}  # GPU id -> host id (a GPU never moves)

    def record(self, charges: Sequence[Charge]) -> None:
        """Add one sweep's charges to the hourly, monthly and per-subject totals, and to the
        report's roll-ups per month and payer and per month and host."""
        if not charges:
            return
        hourly = _merge(((c.gpu_id, c.hour, c.payer, c.kind), c.figures()) for c in charges)
        monthly = _merge(((c.gpu_id, c.month, c.payer, c.kind), c.figures()) for c in charges)
        by_payer = _merge(((c.month, c.payer, c.kind), c.figures()) for c in charges)
        totals = _merge((s, c.figures()) for c in charges for s in c.subjects)

        keys = ("gpu_id", "hour", "payer", "kind")
        month_keys = ("gpu_id", "month", "payer", "kind")
        payer_keys = ("month", "payer", "kind")
        hourly_rows = [dict(zip(keys, k, strict=True)) | v for k, v in hourly.items()]
        monthly_rows = [dict(zip(month_keys, k, strict=True)) | v for k, v in monthly.items()]
        payer_rows = [dict(zip(payer_keys, k, strict=True)) | v for k, v in by_payer.items()]
        total_rows = [{"subject": k[0], "subject_id": k[1]} | v for k, v in totals.items()]

        def work(conn: Connection) -> None:
            _add(conn, gpu_charges_hourly, keys, hourly_rows)
            _add(conn, gpu_charges_monthly, month_keys, monthly_rows)
            _add(conn, payer_charges_monthly, payer_keys, payer_rows)
            host_of = self._hosts(conn, {c.gpu_id for c in charges})
            by_host = _merge(
                ((c.month, host_of[c.gpu_id], c.kind), c.figures())
                for c in charges
                if c.gpu_id in host_of
            )
            host_keys = ("month", "host_id", "kind")
            host_rows = [dict(zip(host_keys, k, strict=True)) | v for k, v in by_host.items()]
            _add(conn, host_charges_monthly, host_keys, host_rows)
            _add(conn, charge_totals, ("subject", "subject_id"), total_rows)

        self.db.write(work)

    def _hosts(self, conn: Connection, gpu_ids: set[int]) -> dict[int, int]:
        """The host of each GPU (read once per GPU; ids the inventory lacks are left out)."""
        missing = gpu_ids - self._host_of.keys()
        if missing:
            query = select(gpus.c.id, gpus.c.host_id).where(gpus.c.id.in_(sorted(missing)))
            self._host_of.update({gid: hid for gid, hid in conn.execute(query).all()})
        return self._host_of

    # --- reading ------------------------------------------------------------------------

    def running_tasks(self) -> list[RunningTask]:
        """Job tasks that hold GPUs now."""
        j, t = jobs, job_tasks
        query = (
            select(j.c.id, j.c.owner, j.c.queued, t.c.gpus)
            .join(t, t.c.job_id == j.c.id)
            .where(t.c.state.in_([str(s) for s in ACTIVE]))
        )
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return [RunningTask(jid, owner, bool(q), tuple(json.loads(g))) for jid, owner, q, g in rows]

    def by_payer(
        self, start: datetime, end: datetime, payers: Sequence[str] | None = None
    ) -> dict[tuple[str, str], dict[str, float]]:
        """Hourly charges in [start, end) summed per (payer, kind)."""
        h = gpu_charges_hourly
        query = (
            select(h.c.payer, h.c.kind, *(func.sum(h.c[n]).label(n) for n in FIGURES))
            .where(h.c.hour >= start, h.c.hour < end)
            .group_by(h.c.payer, h.c.kind)
        )
        if payers is not None:
            query = query.where(h.c.payer.in_(list(payers)))
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return {(r.payer, r.kind): {n: float(getattr(r, n) or 0) for n in FIGURES} for r in rows}

    def booked(
        self, start: datetime, end: datetime, owners: Sequence[str] | None = None
    ) -> list[Booked]:
        """Booked GPUs of reservations overlapping [start, end) (not cancelled)."""
        r, rg = reservations, reservation_gpus
        with self.db.read() as conn:
            longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
            query = (
                select(
                    r.c.owner,
                    rg.c.start_at,
                    rg.c.end_at,
                    rg.c.gpu_id,
                    gpus.c.parent_id.is_not(None),
                    rg.c.share_ppm,
                )
                .join(r, r.c.id == rg.c.reservation_id)
                .join(gpus, gpus.c.id == rg.c.gpu_id)
                .where(
                    rg.c.cancelled.is_(False),
                    rg.c.start_at < end,
                    rg.c.end_at > start,
                    rg.c.start_at >= start - timedelta(seconds=longest + 1),
                )
            )
            if owners is not None:
                query = query.where(r.c.owner.in_(list(owners)))
            rows = conn.execute(query).all()
        return [Booked(o, a, b, g, bool(s), fraction(p)) for o, a, b, g, s, p in rows]

    def incidents(
        self, start: datetime, end: datetime, kinds: Sequence[str], column: str
    ) -> dict[str, int]:
        """How many violations of `kinds` began in [start, end), per `column` (holder,
        offender)."""
        v = violations
        who = v.c[column]
        query = (
            select(who, func.count())
            .where(v.c.kind.in_(list(kinds)), v.c.started_at >= start, v.c.started_at < end)
            .where(who.is_not(None))
            .group_by(who)
        )
        with self.db.read() as conn:
            return {name: int(n) for name, n in conn.execute(query).all()}

    def totals(self, subject: str, ids: Sequence[int]) -> dict[int, dict[str, float]]:
        """Lifetime figures of reservations or jobs."""
        t = charge_totals
        out: dict[int, dict[str, float]] = {}
        with self.db.read() as conn:
            for i in range(0, len(ids), 5000):
                query = select(t).where(
                    t.c.subject == subject, t.c.subject_id.in_(list(ids[i : i + 5000]))
                )
                for row in conn.execute(query).all():
                    out[row.subject_id] = {n: float(getattr(row, n)) for n in FIGURES}
        return out
