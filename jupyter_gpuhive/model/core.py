"""Value types shared by all layers, and the parsing of instants and durations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from enum import StrEnum
from typing import Any

from ..errors import Invalid
from .shares import WHOLE, describe_share, fraction, memory_of_share

UTC = timezone.utc
# The largest id any table can hold (INTEGER on PostgreSQL); a larger id names nothing.
ID_MAX = 2**31 - 1
# Instants and durations far outside these bounds only overflow date arithmetic.
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(3000, 1, 1, tzinfo=UTC)
_LONGEST = timedelta(days=36525)


def utcnow() -> datetime:
    """The current instant, timezone-aware UTC."""
    return datetime.now(UTC)


def parse_instant(value: Any, name: str) -> datetime:
    """Parse an ISO 8601 instant that carries an offset; return it in UTC."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"'{name}' must be an ISO 8601 date-time string with a UTC offset.")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise Invalid(
            f"'{name}' is not a date-time I can read: {value!r}. "
            "Use ISO 8601 with an offset, e.g. 2026-05-04T09:00:00+02:00."
        ) from None
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise Invalid(
            f"'{name}' has no time zone offset ({value!r}); add one, "
            "e.g. 'Z' or '+02:00', so the time is unambiguous."
        )
    if not _EARLIEST <= instant < _LATEST:
        raise Invalid(f"'{name}' ({value!r}) is out of range: use a year from 1970 to 2999.")
    return instant.astimezone(UTC)


def isoformat(instant: datetime | None) -> str | None:
    """Render an instant as ISO 8601 in UTC with an explicit offset."""
    if instant is None:
        return None
    return instant.astimezone(UTC).isoformat()


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: Any, name: str) -> timedelta:
    """Parse a duration: seconds as a number, or text like '90s', '15m', '2h', '1d'."""
    if isinstance(value, bool):
        raise Invalid(f"'{name}' must be a duration such as '2h' or a number of seconds.")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        unit = (match.group(2) or "s").lower()
        seconds = float(match.group(1)) * _UNIT_SECONDS[unit]
    else:
        raise Invalid(f"'{name}' must be a duration such as '2h' or a number of seconds.")
    if not seconds > 0:  # also NaN
        raise Invalid(f"'{name}' must be longer than zero.")
    if seconds > _LONGEST.total_seconds():  # also infinity
        raise Invalid(f"'{name}' is too long: at most 100 years.")
    return timedelta(seconds=seconds)


def describe_instant(instant: datetime, zone: tzinfo) -> str:
    """An instant as people at the site read it: 'Tue 2026-12-08 09:00' on its clock."""
    return f"{instant.astimezone(zone):%a %Y-%m-%d %H:%M}"


def describe_duration(delta: timedelta) -> str:
    """A short human rendering of a duration ('2h', '15min', '1d 4h')."""
    minutes = int(delta.total_seconds() // 60)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    if hours:
        parts.append(f"{hours}h")
    if mins or not parts:
        parts.append(f"{mins}min")
    return " ".join(parts)


@dataclass(frozen=True)
class Identity:
    """Who is asking: a user name, their groups, and whether they administer gpuhive."""

    name: str
    groups: frozenset[str] = frozenset()
    is_admin: bool = False
    admin_hosts: frozenset[str] = frozenset()  # hosts they administer as a host group's admin

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "groups": sorted(self.groups), "admin": self.is_admin}


@dataclass(frozen=True)
class Gpu:
    """A bookable unit: a whole GPU, or a MIG slice of one (`parent_id` set).

    `ref` is how people name it: 'host:index' for a GPU, 'host:index/migGI' (or
    'host:index/migGI.CI' when the compute instance is not 0) for a slice; a slice's index,
    host and model are its parent's, its uuid the MIG UUID.
    """

    id: int
    host: str
    index: int
    uuid: str
    model: str | None = None
    memory_mib: int | None = None
    parent_id: int | None = None
    profile: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    # the site lets bookings hold shares of it (hosts config `shareable`; never a slice)
    shareable: bool = field(default=False, compare=False)
    ref: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        ref = f"{self.host}:{self.index}"
        if self.parent_id is not None:
            ref += f"/{slice_name(self.gpu_instance_id, self.compute_instance_id)}"
        object.__setattr__(self, "ref", ref)

    @property
    def is_slice(self) -> bool:
        """Whether this is a MIG slice (not a whole GPU)."""
        return self.parent_id is not None

    @property
    def device_id(self) -> int:
        """The id of the physical GPU: the parent's for a slice, its own for a GPU."""
        return self.id if self.parent_id is None else self.parent_id

    @property
    def parent_ref(self) -> str:
        """'host:index' of the physical GPU."""
        return f"{self.host}:{self.index}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.ref,
            "host": self.host,
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "memory_mib": self.memory_mib,
            "kind": "slice" if self.is_slice else "gpu",
            "shareable": self.shareable,
        }
        if self.is_slice:
            out["parent"] = self.parent_ref
            out["profile"] = self.profile
            out["gpu_instance_id"] = self.gpu_instance_id
            out["compute_instance_id"] = self.compute_instance_id
        return out


def slice_name(gpu_instance_id: int | None, compute_instance_id: int | None) -> str:
    """The part of a slice's ref after '/': 'mig5' (CI 0) or 'mig5.1'."""
    ci = compute_instance_id or 0
    return f"mig{gpu_instance_id}" if ci == 0 else f"mig{gpu_instance_id}.{ci}"


@dataclass(frozen=True)
class UnitRef:
    """The parts of a unit's ref: 'host:index' (a GPU) or 'host:index/migGI[.CI]' (a slice)."""

    host: str
    index: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def is_slice(self) -> bool:
        """Whether the ref names a MIG slice."""
        return self.gpu_instance_id is not None


# The one pattern of a unit's ref. A host name may hold ':', '/' or spaces (the hosts file
# allows them): the index is after the last ':' that a number (and a slice) follows.
_UNIT_REF = re.compile(r"(?P<host>.+):(?P<index>\d+)(?:/mig(?P<gi>\d+)(?:\.(?P<ci>\d+))?)?")


def parse_ref(text: str) -> UnitRef | None:
    """The parts of 'host:index' or 'host:index/migGI[.CI]'; None for anything else (a UUID)."""
    found = _UNIT_REF.fullmatch(text.strip())
    if found is None:
        return None
    gi, ci = found["gi"], found["ci"]
    return UnitRef(
        found["host"],
        int(found["index"]),
        int(gi) if gi is not None else None,
        (int(ci) if ci is not None else 0) if gi is not None else None,
    )


def units_conflict(a: Gpu, b: Gpu) -> bool:
    """Whether two bookable units cannot be booked at the same time.

    A whole GPU conflicts with itself and with each of its slices (both ways); a slice with
    itself; two different slices of one GPU do not conflict.
    """
    return a.device_id == b.device_id and (a.id == b.id or not a.is_slice or not b.is_slice)


@dataclass(frozen=True)
class SliceDecl:
    """A MIG slice as discovered on a host (its vendor's tool)."""

    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    uuid: str
    memory_mib: int | None = None


@dataclass(frozen=True)
class GpuDecl:
    """A GPU as declared in config or discovered on a host."""

    index: int
    uuid: str
    model: str | None = None
    memory_mib: int | None = None
    slices: tuple[SliceDecl, ...] | None = None  # None: not looked at (slices stay as they are)
    shareable: bool | None = None  # None: as its host says (HostDecl.shareable)


@dataclass(frozen=True)
class HostDecl:
    """A host as configured: where to reach it and, optionally, its GPUs."""

    name: str
    address: str = "localhost"
    port: int = 22
    user: str | None = None
    transport: str = "ssh"
    gpus: tuple[GpuDecl, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # which of its GPUs bookings may share: all (True), none (False), or these indexes
    shareable: bool | frozenset[int] = False

    def shares(self, gpu: GpuDecl) -> bool:
        """Whether bookings may hold shares of this GPU of the host (its own setting first)."""
        if gpu.shareable is not None:
            return gpu.shareable
        if isinstance(self.shareable, bool):
            return self.shareable
        return gpu.index in self.shareable


@dataclass(frozen=True)
class Host:
    """A host of the inventory with its GPUs."""

    name: str
    address: str
    port: int
    user: str | None
    transport: str
    gpus: tuple[Gpu, ...]
    slices: tuple[Gpu, ...] = ()  # the live MIG slices, by parent index, GI, CI

    def units(self) -> list[Gpu]:
        """Every bookable unit: each GPU followed by its slices."""
        by_parent: dict[int, list[Gpu]] = {}
        for part in self.slices:
            by_parent.setdefault(part.device_id, []).append(part)
        return [unit for gpu in self.gpus for unit in (gpu, *by_parent.get(gpu.id, ()))]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "user": self.user,
            "transport": self.transport,
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "slices": [part.to_json() for part in self.slices],
        }


class ReservationStatus(StrEnum):
    """Where a reservation is at an instant: cancelled, upcoming, active or ended."""

    CANCELLED = "cancelled"
    UPCOMING = "upcoming"
    ACTIVE = "active"
    ENDED = "ended"


@dataclass(slots=True)
class Reservation:
    """A booking of a set of GPUs for [start, end), edited and cancelled as one unit."""

    id: int
    owner: str
    title: str
    description: str
    start: datetime
    end: datetime
    gpus: tuple[Gpu, ...]
    created_at: datetime
    cancelled_at: datetime | None = None
    flagged: bool = False
    flag_reason: str | None = None
    share_ppm: int = WHOLE  # the share of its one GPU, in millionths; WHOLE: whole GPUs
    tentative_until: datetime | None = None  # awaiting approval: its hold ends then

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None

    @property
    def tentative(self) -> bool:
        """Whether it waits for approval (its slot held, nothing may run on it yet)."""
        return self.tentative_until is not None and self.cancelled_at is None

    @property
    def share(self) -> float:
        """The share of its GPU as a fraction (1.0: whole GPUs)."""
        return fraction(self.share_ppm)

    @property
    def is_share(self) -> bool:
        """Whether it holds a share of one GPU rather than whole GPUs."""
        return self.share_ppm < WHOLE

    def share_memory_mib(self) -> int | None:
        """The GPU memory its share holds, in MiB (None: the GPU's memory is unknown); for
        whole GPUs, the first GPU's memory."""
        return memory_of_share(self.share_ppm, self.gpus[0].memory_mib) if self.gpus else None

    def held_text(self) -> str:
        """What it holds, in words: '2 GPUs', '1 GPU', or '0.25 of a GPU (20 GiB)'."""
        if self.is_share:
            return describe_share(self.share_ppm, self.gpus[0].memory_mib if self.gpus else None)
        return f"{len(self.gpus)} GPU" + ("s" if len(self.gpus) != 1 else "")

    def gpu_hours(self, start: datetime | None = None, end: datetime | None = None) -> float:
        """GPU-hours it holds within [start, end) (default: its whole span): GPUs × share ×
        hours, so that a quarter of a GPU for 4 h is 1 GPU-hour."""
        low = self.start if start is None else max(start, self.start)
        high = self.end if end is None else min(end, self.end)
        seconds = max(0.0, (high - low).total_seconds())
        return len(self.gpus) * seconds * self.share_ppm / WHOLE / 3600

    def status(self, now: datetime) -> ReservationStatus:
        """Cancelled, upcoming, active or ended at the instant `now`."""
        if self.cancelled:
            return ReservationStatus.CANCELLED
        if now < self.start:
            return ReservationStatus.UPCOMING
        return ReservationStatus.ACTIVE if now < self.end else ReservationStatus.ENDED

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        gpus, cancelled, until = self.gpus, self.cancelled_at, self.tentative_until
        return {
            "id": self.id,
            "owner": self.owner,
            "title": self.title,
            "description": self.description,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "gpus": [gpu.ref for gpu in gpus],
            "gpu_uuids": [gpu.uuid for gpu in gpus],
            "created_at": self.created_at.isoformat(),
            "cancelled_at": cancelled.isoformat() if cancelled else None,
            "status": str(self.status(now or utcnow())),
            "flagged": self.flagged,
            "flag_reason": self.flag_reason,
            "share": fraction(self.share_ppm),
            "share_memory_mib": self.share_memory_mib() if self.is_share else None,
            "tentative": self.tentative,
            "tentative_until": until.isoformat() if until and self.tentative else None,
        }
