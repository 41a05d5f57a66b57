"""The reads of the accounting report, summed by the database: charges per month and payer
and per month and GPU (the caller knows each GPU's host; the join would cost more than the
rows it saves); reserved GPU-hours of a month per owner and host."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select

from .accounting import FIGURES
from .database import Database
from .schema import gpu_charges_monthly, gpus, hosts, reservation_gpus, reservation_stats
from .schema import reservations as _r


@dataclass(frozen=True)
class Summed:
    """Charges of one month summed for one payer (or host) and kind."""

    month: datetime
    who: str | int  # a payer ('' for nobody), or a GPU id
    kind: str
    figures: dict[str, float]


def _seconds(dialect: str, start: Any, end: Any) -> ColumnElement[Any]:
    """end - start in seconds, in SQL (SQLite keeps instants as ISO text)."""
    if dialect == "sqlite":
        return (func.julianday(end) - func.julianday(start)) * 86400.0
    return func.extract("epoch", end - start)


class ReportReads:
    """What the accounting report reads, aggregated where the rows are."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def charges(self, first: datetime, last: datetime) -> tuple[list[Summed], list[Summed]]:
        """Monthly charges with month in [first, last], per (month, payer, kind) and per
        (month, GPU, kind)."""
        m = gpu_charges_monthly
        sums = [func.sum(m.c[name]).label(name) for name in FIGURES]
        span = and_(m.c.month >= first, m.c.month <= last)
        by_payer = select(m.c.month, m.c.payer, m.c.kind, *sums).where(span)
        by_payer = by_payer.group_by(m.c.month, m.c.payer, m.c.kind)
        by_gpu = select(m.c.month, m.c.gpu_id, m.c.kind, *sums).where(span)
        by_gpu = by_gpu.group_by(m.c.month, m.c.gpu_id, m.c.kind)
        with self.db.read() as conn:
            payers = conn.execute(by_payer).all()
            per_gpu = conn.execute(by_gpu).all()

        def summed(rows: Sequence[Any]) -> list[Summed]:
            return [
                Summed(r[0], r[1], r[2], {n: float(r[3 + i] or 0) for i, n in enumerate(FIGURES)})
                for r in rows
            ]

        return summed(payers), summed(per_gpu)

    def reserved(self, start: datetime, end: datetime) -> dict[tuple[str, str], float]:
        """GPU-hours of [start, end) booked (not cancelled), per (owner, host): those within
        it summed by the database, those across its start or end clipped here."""
        rg, host = reservation_gpus, hosts.c.name
        out: dict[tuple[str, str], float] = {}
        # Joined with the hosts, the plan starts from the reservations by start (fast).
        joined = (
            _r.join(rg, rg.c.reservation_id == _r.c.id)
            .join(gpus, gpus.c.id == rg.c.gpu_id)
            .join(hosts, hosts.c.id == gpus.c.host_id)
        )
        with self.db.read() as conn:
            seconds = _seconds(conn.dialect.name, rg.c.start_at, rg.c.end_at)
            longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
            inside = (
                select(_r.c.owner, host, func.sum(seconds))
                .select_from(joined)
                .where(_r.c.cancelled_at.is_(None), _r.c.start_at >= start, _r.c.end_at <= end)
                .group_by(_r.c.owner, host)
            )
            for owner, name, total in conn.execute(inside).all():
                out[(owner, name)] = float(total or 0) / 3600
            reach = timedelta(seconds=longest + 1)
            r_start, r_end = _r.c.start_at, _r.c.end_at
            across = (
                select(_r.c.owner, host, r_start, r_end)
                .select_from(joined)
                .where(_r.c.cancelled_at.is_(None))
                .where(or_(*(and_(r_start >= e - reach, r_start < e, r_end > e)
                             for e in (start, end))))
            )  # fmt: skip
            rows = conn.execute(across).all()
        for owner, name, a, b in rows:
            hours = (min(b, end) - max(a, start)).total_seconds() / 3600
            out[(owner, name)] = out.get((owner, name), 0.0) + hours
        return out
