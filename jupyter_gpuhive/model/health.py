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
                "told; choose another GPU (POST reservations/search finds the earliest)."
            )
        by = f" by {self.drained_by}" if self.drained_by else ""
        reason = f": {self.drain_reason}" if self.drain_reason else ""
        return (
            f"{ref} cannot be booked: it was drained for maintenance{by}{reason}. Choose another "
            "GPU (POST reservations/search finds the earliest)."
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
