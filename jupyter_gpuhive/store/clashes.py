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

    def describe(self) -> str:
        span = f"{self.start:%Y-%m-%d %H:%M}–{self.end:%Y-%m-%d %H:%M} UTC"
        return f"{self.gpu.ref} is reserved by {self.owner} ('{self.title}', {span})"

    def to_json(self) -> dict[str, Any]:
        return {
            "reservation": self.reservation_id,
            "owner": self.owner,
            "title": self.title,
            "gpu": self.gpu.ref,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
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
) -> list[Clash]:
    """Live reservations overlapping [start, end) on any of `gpu_ids` (`gpu`: id -> Gpu).

    A unit is in the way of another on the same physical GPU when either is the whole GPU or
    both are the same slice (model.units_conflict; the database's overlap rule is the same).
    """
    units = [gpu(g) for g in gpu_ids]
    devices = {u.device_id for u in units}
    rg, r = reservation_gpus, reservations
    query = (
        select(rg.c.gpu_id, r.c.id, r.c.owner, r.c.title, r.c.start_at, r.c.end_at)
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
    for row in conn.execute(query):
        booked = gpu(row.gpu_id)
        if any(units_conflict(booked, unit) for unit in units):
            clashes.append(Clash(row.id, row.owner, row.title, booked, row.start_at, row.end_at))
    return clashes
