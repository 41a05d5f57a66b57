"""Violations as values: one record of what was seen, and the same record as stored.

`Violation` is the one definition of a violation's fields: detection makes it, the store
keeps it, handlers are told it (`protection.handlers.Incident` adds what they need to say).
`ViolationRecord` is a stored one: the same fields plus its id, when it was last seen and
ended, and the actions taken on it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

FOREIGN = "foreign"  # on a GPU reserved by someone else
UNRESERVED = "unreserved"  # on a GPU nobody reserved (level 2)
GHOST = "ghost"  # memory or utilization with no process listed
IDLE = "idle"  # a reserved GPU nobody uses (not a violation; recorded alongside them)
NO_SHOW = "no-show"  # a reservation its holder never used after it began (a notice, too)
KERNEL_END = "kernel-end"  # what a kernel's end policy did at its reservation's end (a notice)
GPU_HEALTH = "gpu-health"  # a GPU of the reservation failed or was drained (a notice)
OVER_SHARE = "over-share"  # a share holder using more of the GPU's memory than the share
KINDS = (FOREIGN, UNRESERVED, GHOST, IDLE, NO_SHOW, KERNEL_END, GPU_HEALTH, OVER_SHARE)
HOLDER_KINDS = frozenset({IDLE, NO_SHOW, KERNEL_END, GPU_HEALTH})  # to the holder, not an offender
# what detection finds: the ladder's kinds
OFFENCES = frozenset({FOREIGN, UNRESERVED, GHOST, OVER_SHARE})


@dataclass(frozen=True)
class Violation:
    """One violation (or idle notice): its kind, GPU, the people involved and the processes."""

    kind: str
    host: str
    gpu: str  # 'host:index' (idle notices: every GPU of the reservation, comma separated)
    gpu_uuid: str
    offender: str | None  # UNIX user; None for ghosts and idle notices
    holder: str | None  # gpuhive user holding the GPU; None if nobody reserved it
    reservation_id: int | None
    level: int  # the protection level it was seen at
    pids: tuple[int, ...]
    commands: tuple[str, ...]
    detail: str | None
    started_at: datetime

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        """What stays the same while the violation lasts."""
        return self.kind, self.gpu_uuid, self.offender or "", self.reservation_id

    def values(self) -> dict[str, Any]:
        """The fields of `Violation` by name (also of a subclass: its own fields left out)."""
        return {f.name: getattr(self, f.name) for f in fields(Violation)}


@dataclass(frozen=True)
class ActionRecord:
    """One handler's action on a violation and how it went ('ok' or 'failed')."""

    at: datetime
    step: int | None
    handler: str
    outcome: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "step": self.step,
            "handler": self.handler,
            "outcome": self.outcome,
            "detail": self.detail,
        }


@dataclass(frozen=True, kw_only=True)
class ViolationRecord(Violation):
    """A stored violation: its id, when it was last seen and ended, and its actions."""

    id: int
    last_seen_at: datetime
    ended_at: datetime | None
    actions: tuple[ActionRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "host": self.host,
            "gpu": self.gpu,
            "gpu_uuid": self.gpu_uuid,
            "offender": self.offender,
            "holder": self.holder,
            "reservation": self.reservation_id,
            "level": self.level,
            "pids": list(self.pids),
            "commands": list(self.commands),
            "detail": self.detail,
            "start": self.started_at.isoformat(),
            "last_seen": self.last_seen_at.isoformat(),
            "end": self.ended_at.isoformat() if self.ended_at else None,
            "ongoing": self.ended_at is None,
            "actions": [a.to_json() for a in self.actions],
        }
