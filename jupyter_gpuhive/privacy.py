"""Privacy: what a requester sees of other people's jobs, reservations, violations and usage.

Owners and admins (of the site, or of the host group a thing is on) see everything of a
thing; everyone else sees what the calendar, the overview and the queue need. Job env values
are write-only: nobody gets them back, not even the owner (the names stay, each value reads
MASK). docs/privacy.md has the table.

The same rule holds for what leaves the server: a channel that only a thing's owner (or a
person involved) reads gets their view; a channel anyone may read (a site webhook, a site
feed) gets the view of ANYONE, a signed-in user who owns and administers nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .model import Identity, Reservation
from .model.authority import sees_hosts
from .model.jobs import MASK, Job, masked

__all__ = [
    "ANYONE",
    "MASK",
    "Privacy",
    "job_json",
    "job_summary_json",
    "masked",
    "reservation_json",
    "sees_all_of",
    "shows_description",
    "violation_brief",
]


@dataclass(frozen=True)
class Privacy:
    """Site choices (GpuHiveApp traits); the defaults fit a lab of people who share GPUs."""

    public_descriptions: bool = False  # reservation and job descriptions shown to everyone
    public_violations: bool = False  # every violation listed (PIDs, commands: involved only)
    public_usage: bool = False  # per-user and per-reservation usage of everyone


# The reader of a channel everyone may read: owns nothing (no user is named ""), no admin.
ANYONE = Identity("")


def sees_all_of(who: Identity, owner: str | None, hosts: Iterable[str] = ()) -> bool:
    """Whether `who` sees everything of a thing `owner` owns on `hosts` (they own it, or
    administer the site or every one of those hosts' groups: model/authority.py)."""
    return (bool(owner) and who.name == owner) or sees_hosts(who, hosts)


def shows_description(
    owner: str | None, who: Identity, privacy: Privacy, hosts: Iterable[str] = ()
) -> bool:
    """Whether `who` reads the description of a reservation or job `owner` owns."""
    return privacy.public_descriptions or sees_all_of(who, owner, hosts)


def job_json(job: Job, who: Identity, privacy: Privacy) -> dict[str, Any]:
    """A job as `who` may see it: its definition for the owner and admins, else a summary."""
    detail = sees_all_of(who, job.owner, {t.host for t in job.tasks})
    return job.to_json(detail=detail, description=privacy.public_descriptions)


def job_summary_json(job: Job, who: Identity, privacy: Privacy) -> dict[str, Any]:
    """A job's summary (never its definition) with the description where `who` may read it."""
    hosts = {t.host for t in job.tasks}
    return job.to_json(description=shows_description(job.owner, who, privacy, hosts))


def reservation_json(
    res: Reservation, who: Identity, privacy: Privacy, now: datetime | None = None
) -> dict[str, Any]:
    """A reservation as `who` may see it: title and owner for all, the description maybe."""
    data = res.to_json(now)
    if not shows_description(res.owner, who, privacy, {g.host for g in res.gpus}):
        del data["description"]
    return data


def violation_brief(item: dict[str, Any]) -> dict[str, Any]:
    """Someone else's violation as public_violations shows it: no PIDs, command lines or
    action details."""
    brief = {k: v for k, v in item.items() if k not in ("pids", "commands")}
    if "actions" in brief:
        brief["actions"] = [{k: v for k, v in a.items() if k != "detail"} for a in brief["actions"]]
    return brief
