"""A GPU's health as gpuhive judged it, and whether an admin drained it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class GpuCondition:
    """Health (ok / degraded / failed, with reasons) and drain of one GPU."""

    gpu_id: int
    state: str = "ok"
    reasons: tuple[str, ...] = ()
    since: datetime | None = None
    drained: bool = False
    drained_by: str | None = None
    drain_reason: str | None = None

    @property
    def bookable(self) -> bool:
        """Failed and drained GPUs (and their slices) take no new bookings or jobs."""
        return self.state != "failed" and not self.drained

    def why_not(self, ref: str) -> str:
        """The sentence a refused booking gives."""
        if self.state == "failed":
            why = "; ".join(self.reasons) or "it failed"
            return (
                f"{ref} cannot be booked: its health check failed ({why}). An admin has been "
                "told; choose another GPU (%gpureserve N --earliest finds the earliest free ones)."
            )
        by = f" by {self.drained_by}" if self.drained_by else ""
        reason = f": {self.drain_reason}" if self.drain_reason else ""
        return (
            f"{ref} cannot be booked: it was drained for maintenance{by}{reason}. Choose another "
            "GPU (%gpureserve N --earliest finds the earliest free ones)."
        )

    def what_happened(self) -> str:
        """'failed its health check (reasons)' or 'was drained for maintenance by X: why'."""
        if self.state == "failed":
            return f"failed its health check ({'; '.join(self.reasons) or 'no reason given'})"
        by = f" by {self.drained_by}" if self.drained_by else ""
        return f"was drained for maintenance{by}" + (
            f": {self.drain_reason}" if self.drain_reason else ""
        )

    def to_json(self) -> dict[str, Any]:
        """The condition as GET health shows it."""
        return {
            "state": self.state,
            "reasons": list(self.reasons),
            "since": self.since.isoformat() if self.since else None,
            "drained": self.drained,
            "drained_by": self.drained_by,
            "drain_reason": self.drain_reason,
            "bookable": self.bookable,
        }


# A GPU's state as every view shows it, most pressing first; only "free" may be booked now.
# GET hosts sends it per GPU and slice as "state"; %gpustatus and the sidebar read it (the
# sidebar and the magics turn "reserved" into "mine" when the holder is the viewer).
GPU_STATES = ("down", "failed", "drained", "reserved", "busy", "unknown", "free")
UNBOOKABLE = frozenset({"failed", "drained"})


def gpu_state(
    condition: GpuCondition | None, host_state: str, reserved: bool, processes: bool
) -> str:
    """One of GPU_STATES: down (its host), failed or drained (never free), reserved now,
    busy (unreserved but running processes), unknown (no data yet) or free."""
    if host_state == "down":
        return "down"
    if condition is not None and condition.state == "failed":
        return "failed"
    if condition is not None and condition.drained:
        return "drained"
    if reserved:
        return "reserved"
    if processes:
        return "busy"
    return "free" if host_state == "up" else "unknown"


def condition_of(
    conditions: dict[int, GpuCondition], unit_id: int, parent_id: int | None
) -> GpuCondition | None:
    """A unit's own condition, or its GPU's when that one closes it (a slice of a failed or
    drained GPU is closed with it)."""
    own = conditions.get(unit_id)
    parent = conditions.get(parent_id) if parent_id is not None else None
    if parent is not None and not parent.bookable and (own is None or own.bookable):
        return parent
    return own


def none_bookable(closed: list[tuple[str, GpuCondition]], shown: int = 6) -> str:
    """The refusal when GPUs exist but every one is failed or drained: which, and why."""
    named = "; ".join(f"{ref} {c.what_happened()}" for ref, c in closed[:shown])
    more = f"; and {len(closed) - shown} more" if len(closed) > shown else ""
    return (
        f"No GPU can be booked now: all {len(closed)} are failed or drained ({named}{more}). "
        "Admins see failures in the GPU sidebar; %gpustatus shows when a GPU is back."
    )
