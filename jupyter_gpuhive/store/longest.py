"""The longest booking stored: kept in `reservation_stats` by every write, it bounds the
reads of a window (a booking overlapping it starts at most that long before it)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import Connection, Subquery, and_, exists, select, update

from .schema import reservation_gpus, reservation_stats, reservations


def overlapping(
    conn: Connection,
    start: datetime,
    end: datetime,
    *,
    gpu_ids: Iterable[int] | None = None,
    owner: str | None = None,
    include_cancelled: bool = False,
    limit: int | None = None,
) -> Subquery:
    """The ids of the reservations overlapping [start, end) (the filters given), as a
    subquery: the first `limit` by start."""
    longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
    query = select(reservations.c.id).where(
        reservations.c.start_at < end,
        reservations.c.end_at > start,
        reservations.c.start_at >= start - timedelta(seconds=longest + 1),
    )
    if not include_cancelled:
        query = query.where(reservations.c.cancelled_at.is_(None))
    if owner is not None:
        query = query.where(reservations.c.owner == owner)
    if gpu_ids is not None:
        query = query.where(
            exists().where(
                reservation_gpus.c.reservation_id == reservations.c.id,
                reservation_gpus.c.gpu_id.in_(list(gpu_ids)),
            )
        )
    query = query.order_by(reservations.c.start_at, reservations.c.id)
    if limit is not None:
        query = query.limit(limit)
    return query.subquery()


class LongestKnown:
    """The longest booking stored, as far as this process knows (`reservation_stats` only
    grows): a write of a booking no longer than that leaves the row alone, a round trip less
    in nearly every booking. Another process's longer bookings only make the row longer."""

    def __init__(self) -> None:
        self.seconds = 0  # committed: the row holds at least this

    def note(self, conn: Connection, start: datetime, end: datetime) -> None:
        """Inside a booking's write: make the row hold its length."""
        seconds = _length(start, end)
        if seconds <= self.seconds:
            return
        stats = reservation_stats
        conn.execute(
            update(stats)
            .where(and_(stats.c.id == 1, stats.c.longest_seconds < seconds))
            .values(longest_seconds=seconds)
        )

    def stored(self, start: datetime, end: datetime) -> None:
        """After the write's commit: the row holds at least this length now."""
        self.seconds = max(self.seconds, _length(start, end))


def _length(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds()) + 1
