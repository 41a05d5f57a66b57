"""Clashes: the live reservations in the way of a booking, and the 409 that names them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from ..errors import Conflict
from ..model import Gpu, units_conflict
from ..model.shares import WHOLE, describe_share, fraction
from .database import EXCLUSION_VIOLATION, sqlstate
from .schema import reservation_gpus, reservations


@dataclass(frozen=True)
class Clash:
    """An existing reservation that overlaps a requested one on one GPU or slice."""

    reservation_id: int
    owner: str
    title: str
    gpu: Gpu
    start: datetime
    end: datetime
    share: int = WHOLE  # the millionths of the unit it holds

    def describe(self) -> str:
        span = f"{self.start:%Y-%m-%d %H:%M}–{self.end:%Y-%m-%d %H:%M} UTC"
        held = "" if self.share >= WHOLE else f" holds {describe_share(self.share)} and"
        return f"{self.gpu.ref}{held} is reserved by {self.owner} ('{self.title}', {span})"

    def to_json(self) -> dict[str, Any]:
        return {
            "reservation": self.reservation_id,
            "owner": self.owner,
            "title": self.title,
            "gpu": self.gpu.ref,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "share": fraction(self.share),
        }


def clash_error(clashes: Sequence[Clash]) -> Conflict:
    """A 409 that names every conflicting reservation."""
    shown = "; ".join(c.describe() for c in clashes[:5])
    more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
    return Conflict(
        f"Those GPUs are not free for that time: {shown}{more}.",
        conflicts=[c.to_json() for c in clashes],
    )


def is_overlap(error: IntegrityError) -> bool:
    """Whether the database refused a write because two reservations would overlap."""
    return sqlstate(error) == EXCLUSION_VIOLATION or "overlapping reservation" in str(error)


def find_clashes(
    conn: Connection,
    gpu: Callable[[int], Gpu],
    gpu_ids: Sequence[int],
    start: datetime,
    end: datetime,
    exclude: int | None = None,
    share: int = WHOLE,
) -> list[Clash]:
    """Live reservations in the way of holding `share` of `gpu_ids` over [start, end)
    (`gpu`: id -> Gpu).

    Between whole bookings, a unit is in the way of another on the same physical GPU when
    either is the whole GPU or both are the same slice (model.units_conflict). Where a share
    is involved, the bookings in the way are those live at an instant where the shares of the
    GPU would add up to more than one whole GPU (a slice counts whole). The database's rule
    is the same (migration 0022).
    """
    units = [gpu(g) for g in gpu_ids]
    devices = {u.device_id for u in units}
    rg, r = reservation_gpus, reservations
    query = (
        select(rg.c.gpu_id, r.c.id, r.c.owner, r.c.title, r.c.start_at, r.c.end_at, rg.c.share_ppm)
        .join(r, r.c.id == rg.c.reservation_id)
        .where(
            rg.c.device_id.in_(list(devices)),
            rg.c.cancelled.is_(False),
            rg.c.start_at < end,
            rg.c.end_at > start,
        )
        .order_by(rg.c.start_at)
    )
    if exclude is not None:
        query = query.where(rg.c.reservation_id != exclude)
    clashes = []
    shared: list[Clash] = []  # the rows where a share is involved: judged by their sums
    for row in conn.execute(query):
        booked = gpu(row.gpu_id)
        found = Clash(row.id, row.owner, row.title, booked, row.start_at, row.end_at, row.share_ppm)
        if share < WHOLE or row.share_ppm < WHOLE:
            shared.append(found)
        elif any(units_conflict(booked, unit) for unit in units):
            clashes.append(found)
    for device in devices:
        clashes += over_full(share, start, end, [c for c in shared if c.gpu.device_id == device])
    return sorted(clashes, key=lambda c: (c.start, c.reservation_id))


def over_full(share: int, start: datetime, end: datetime, others: Sequence[Clash]) -> list[Clash]:
    """Those of `others` (live on one GPU, overlapping [start, end)) live at an instant of
    [start, end) where they and `share` add up to more than a whole GPU."""
    instants = {start, *(o.start for o in others if start < o.start < end)}
    over: dict[int, Clash] = {}
    for at in sorted(instants):
        live = [o for o in others if o.start <= at < o.end]
        if share + sum(o.share for o in live) > WHOLE:
            over.update((id(o), o) for o in live)
    return list(over.values())
