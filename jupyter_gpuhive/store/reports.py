"""The reads of the accounting report, from its roll-ups: charges per month and payer and per
month and host (added to by every sweep), and GPU-hours booked per month, owner and host (kept
for ended months, see schema/rollups.py; the month in progress and later ones are summed live).
A year's report reads a few rows per user and host, not one per GPU or reservation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, case, func, insert, or_, select, text

from ..model.shares import WHOLE
from .accounting import FIGURES, QUEUED
from .database import Database
from .schema import (
    gpus,
    host_charges_monthly,
    hosts,
    payer_charges_monthly,
    reservation_gpus,
    reservation_stats,
    reserved_monthly,
)
from .schema import reservations as _r

SeparateSums = tuple[dict[str, float], dict[int, float]]  # seconds per owner, per host id


@dataclass(frozen=True)
class Summed:
    """Charges of one month summed for one payer (or host) and kind ('*': all kinds, with
    the used seconds of queued jobs as 'queued_seconds')."""

    month: datetime
    who: str  # a payer ('' for nobody), or a host's name
    kind: str
    figures: dict[str, float]


@dataclass(frozen=True)
class Reserved:
    """GPU-hours booked (not cancelled) within one span, per owner and per host name."""

    by_owner: dict[str, float] = field(default_factory=dict)
    by_host: dict[str, float] = field(default_factory=dict)


def _seconds(dialect: str, start: Any, end: Any) -> ColumnElement[Any]:
    """end - start in seconds, in SQL (SQLite keeps instants as ISO text)."""
    if dialect == "sqlite":
        return (func.julianday(end) - func.julianday(start)) * 86400.0
    return func.extract("epoch", end - start)


def _summed(rows: Sequence[Any], names: dict[int, str] | None = None) -> list[Summed]:
    out = []
    for row in rows:
        who = names.get(row[1], str(row[1])) if names is not None else row[1]
        figures = {n: float(row[2 + i] or 0) for i, n in enumerate(FIGURES)}
        figures["queued_seconds"] = float(row[2 + len(FIGURES)] or 0)
        out.append(Summed(row[0], who, "*", figures))
    return out


def booked_seconds(conn: Connection, start: datetime, end: datetime) -> SeparateSums:
    """Seconds of [start, end) booked (not cancelled), per owner and per host id, summed
    from the reservations: those within the span by the database, those across its start or
    end clipped here."""
    rg = reservation_gpus
    pairs: dict[tuple[str, int], float] = {}
    joined = _r.join(rg, rg.c.reservation_id == _r.c.id).join(gpus, gpus.c.id == rg.c.gpu_id)
    # a share counts its part of the GPU: a quarter GPU for 4 h is 1 GPU-hour
    seconds = _seconds(conn.dialect.name, rg.c.start_at, rg.c.end_at) * rg.c.share_ppm / WHOLE
    longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
    host = gpus.c.host_id
    inside = (
        select(_r.c.owner, host, func.sum(seconds))
        .select_from(joined)
        .where(_r.c.cancelled_at.is_(None), _r.c.start_at >= start, _r.c.end_at <= end)
        .group_by(_r.c.owner, host)
    )
    for owner, host_id, total in conn.execute(inside).all():
        pairs[(owner, host_id)] = float(total or 0)
    reach = timedelta(seconds=longest + 1)
    r_start, r_end = _r.c.start_at, _r.c.end_at
    across = (
        select(_r.c.owner, host, r_start, r_end, rg.c.share_ppm)
        .select_from(joined)
        .where(_r.c.cancelled_at.is_(None))
        .where(or_(*(and_(r_start >= e - reach, r_start < e, r_end > e) for e in (start, end))))
    )
    for owner, host_id, a, b, share in conn.execute(across).all():
        clipped = (min(b, end) - max(a, start)).total_seconds() * share / WHOLE
        pairs[(owner, host_id)] = pairs.get((owner, host_id), 0.0) + clipped
    by_owner: dict[str, float] = {}
    by_host: dict[int, float] = {}
    for (owner, host_id), value in pairs.items():
        by_owner[owner] = by_owner.get(owner, 0.0) + value
        by_host[host_id] = by_host.get(host_id, 0.0) + value
    return by_owner, by_host


class ReportReads:
    """What the accounting report reads: roll-ups, and live sums for months not ended."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def charges(self, first: datetime, last: datetime) -> tuple[list[Summed], list[Summed]]:
        """Monthly charges with month in [first, last], per (month, payer) and per (month,
        host name), summed over kinds (kind '*'), with the used seconds of queued jobs apart
        ('queued_seconds')."""
        p, h = payer_charges_monthly, host_charges_monthly

        def summed_over_kinds(table: Any, who: Any) -> Any:
            queued = case((table.c.kind == QUEUED, table.c.used_seconds), else_=0.0)
            return (
                select(table.c.month, who, *(func.sum(table.c[n]) for n in FIGURES),
                       func.sum(queued))
                .where(table.c.month >= first, table.c.month <= last)
                .group_by(table.c.month, who)
            )  # fmt: skip

        with self.db.read() as conn:
            payers = conn.execute(summed_over_kinds(p, p.c.payer)).all()
            per_host = conn.execute(summed_over_kinds(h, h.c.host_id)).all()
            names = dict(conn.execute(select(hosts.c.id, hosts.c.name)).all())
        return _summed(payers), _summed(per_host, names)

    def reserved(self, spans: Sequence[tuple[datetime, datetime]], now: datetime) -> list[Reserved]:
        """GPU-hours booked within each span: ended spans from the roll-up (summed and kept
        there on first use), others live."""
        if not spans:
            return []
        m = reserved_monthly.c
        wanted = set(spans)
        kept: dict[tuple[datetime, datetime], SeparateSums] = {}
        with self.db.read() as conn:
            rows = conn.execute(
                select(m.start_at, m.end_at, m.owner, m.host_id, m.seconds).where(
                    m.start_at >= min(a for a, _ in spans), m.start_at <= max(a for a, _ in spans)
                )
            ).all()
            names = dict(conn.execute(select(hosts.c.id, hosts.c.name)).all())
        cached = _by_span(rows, wanted)
        for span in spans:
            if span in cached:
                kept[span] = cached[span]
            elif span[1] <= now:
                kept[span] = self._keep(*span)
            else:
                with self.db.read() as conn:
                    kept[span] = booked_seconds(conn, *span)
        return [_hours(*kept[span], names) for span in spans]

    def _keep(self, start: datetime, end: datetime) -> SeparateSums:
        """Sum an ended span and store it, in one write transaction (so that no change to
        a reservation falls between the sum and the store: the triggers would miss it)."""
        m = reserved_monthly.c

        def work(conn: Connection) -> SeparateSums:
            if conn.dialect.name == "postgresql":  # the triggers' deletes wait for the commit
                conn.execute(text("LOCK TABLE reserved_monthly IN SHARE ROW EXCLUSIVE MODE"))
            rows = conn.execute(
                select(m.start_at, m.end_at, m.owner, m.host_id, m.seconds).where(
                    m.start_at == start, m.end_at == end
                )
            ).all()
            found = _by_span(rows, {(start, end)})
            if (start, end) in found:  # another server kept it meanwhile
                return found[(start, end)]
            by_owner, by_host = booked_seconds(conn, start, end)
            span = {"start_at": start, "end_at": end}
            conn.execute(
                insert(reserved_monthly),
                [span | {"owner": "", "host_id": 0, "seconds": 0.0}]
                + [span | {"owner": o, "host_id": 0, "seconds": s} for o, s in by_owner.items()]
                + [span | {"owner": "", "host_id": h, "seconds": s} for h, s in by_host.items()],
            )
            return by_owner, by_host

        return self.db.write(work)


def _by_span(
    rows: Sequence[Any], wanted: set[tuple[datetime, datetime]]
) -> dict[tuple[datetime, datetime], SeparateSums]:
    """Stored roll-up rows of the wanted spans that are complete (have their marker row)."""
    found: dict[tuple[datetime, datetime], SeparateSums] = {}
    complete = set()
    for start, end, owner, host_id, seconds in rows:
        span = (start, end)
        if span not in wanted:
            continue
        by_owner, by_host = found.setdefault(span, ({}, {}))
        if owner:
            by_owner[owner] = seconds
        elif host_id:
            by_host[host_id] = seconds
        else:
            complete.add(span)
    return {span: sums for span, sums in found.items() if span in complete}


def _hours(
    by_owner: dict[str, float], by_host: dict[int, float], names: dict[int, str]
) -> Reserved:
    return Reserved(
        {owner: s / 3600 for owner, s in by_owner.items()},
        {names.get(h, str(h)): s / 3600 for h, s in by_host.items()},
    )
