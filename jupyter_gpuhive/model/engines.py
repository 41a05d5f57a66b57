"""An engine under some hosts (Slurm) that enforces gpuhive's bookings: what it is told to hold.

gpuhive's store stays the one authority for who holds which GPU when; an engine mirrors each
booking on its nodes as a reservation of its own, named after the booking, and says so when
it refuses one or when its reservations drift (`bookings/engines.py` drives it; a host
backend brings it: `hosts/backends/slurm.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

PREFIX = "gpuhive-"  # an engine reservation's name: PREFIX + the booking's id


def engine_name(reservation_id: int) -> str:
    """The engine reservation that mirrors booking `reservation_id`."""
    return f"{PREFIX}{reservation_id}"


def booking_of(name: str) -> int | None:
    """The booking an engine reservation mirrors, from its name (None: not gpuhive's)."""
    rest = name[len(PREFIX) :] if name.startswith(PREFIX) else ""
    return int(rest) if rest.isdigit() else None


@dataclass(frozen=True)
class Held:
    """What an engine reservation holds: GPUs per node for [start, end), for these accounts."""

    name: str
    start: datetime
    end: datetime
    gpus: tuple[tuple[str, int], ...]  # (node, GPUs booked there), sorted by node
    users: tuple[str, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node for node, _ in self.gpus)


@dataclass(frozen=True)
class EngineJob:
    """A job the engine runs now (anyone's, submitted outside gpuhive too) and the GPUs of its
    nodes it holds until `end` (its time limit)."""

    job_id: int
    user: str  # the engine's account name
    start: datetime
    end: datetime
    gpus: tuple[tuple[str, int], ...]  # (node, GPU index there)


class EngineRefused(Exception):
    """The engine refused a reservation or a change; the message is a sentence for people."""


class ReservationEngine(Protocol):
    """The reservations of one engine (one Slurm cluster)."""

    label: str  # its name in sentences ('Slurm 22.05.8')

    async def why_not(self, gpus: dict[str, tuple[int, int]]) -> str | None:
        """Why {node: (GPUs booked, GPUs it has)} cannot be held (partial nodes), or None."""
        ...

    async def hold(self, held: Held, now: datetime) -> None:
        """Create the reservation; EngineRefused with the engine's words when it cannot."""
        ...

    async def change(self, held: Held, now: datetime) -> None:
        """Make the existing reservation `held.name` hold `held`; EngineRefused when it cannot."""
        ...

    async def release(self, name: str) -> None:
        """Delete the reservation (gone already: nothing to do); EngineRefused when it cannot."""
        ...

    async def listing(self) -> dict[str, Held]:
        """Every reservation of gpuhive's (by name) as the engine holds it now."""
        ...

    async def running(self) -> list[EngineJob]:
        """The jobs that hold GPUs of the engine's nodes now; EngineRefused when unknown."""
        ...
