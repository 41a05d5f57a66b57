"""Privacy: what a requester sees of other people's jobs, reservations, violations and usage.

Owners and admins see everything of a thing; everyone else sees what the calendar, the
overview and the queue need. Job env values are write-only: nobody gets them back, not
even the owner (the names stay, each value reads MASK). docs/privacy.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .model import Identity, Reservation
from .model.jobs import MASK, Job, masked

__all__ = ["MASK", "Privacy", "job_json", "masked", "reservation_json", "sees_all_of"]


@dataclass(frozen=True)
class Privacy:
    """Site choices (GpuHiveApp traits); the defaults fit a lab of people who share GPUs."""

    public_descriptions: bool = False  # reservation and job descriptions shown to everyone
    public_violations: bool = False  # every violation listed (PIDs, commands: involved only)
    public_usage: bool = False  # per-user and per-reservation usage of everyone


def sees_all_of(who: Identity, owner: str | None) -> bool:
    """Whether `who` sees everything of a thing `owner` owns (they own it, or administer)."""
    return who.is_admin or (owner is not None and who.name == owner)


def job_json(job: Job, who: Identity, privacy: Privacy) -> dict[str, Any]:
    """A job as `who` may see it: its definition for the owner and admins, else a summary."""
    return job.to_json(detail=sees_all_of(who, job.owner), description=privacy.public_descriptions)


def reservation_json(
    res: Reservation, who: Identity, privacy: Privacy, now: datetime | None = None
) -> dict[str, Any]:
    """A reservation as `who` may see it: title and owner for all, the description maybe."""
    data = res.to_json(now)
    if not (privacy.public_descriptions or sees_all_of(who, res.owner)):
        del data["description"]
    return data
