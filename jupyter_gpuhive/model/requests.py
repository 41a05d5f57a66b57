"""What a request asks for, as typed values: the REST API's edge (server/api/schemas) turns
each JSON body into one of these after checking its shape (types, lengths, ranges, names);
the domain checks what only it can know (unknown GPUs, clashes, rules, who may do what).

Text is already trimmed of surrounding whitespace, except a job's command, which is code and
kept exactly as sent. Instants are timezone-aware UTC, durations timedeltas.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class Booking:
    """A new reservation: `end` or `duration` (not both; the service says so when both)."""

    title: str
    gpus: tuple[str, ...]
    start: datetime | None = None  # None: now
    end: datetime | None = None
    duration: timedelta | None = None
    description: str = ""
    owner: str | None = None  # admins only: book for someone else
    lend: bool = True  # its GPUs may run preemptible jobs while the holder does not use them
    reclaim_before_start: bool = False  # take lent GPUs back before the start (site's time)
    share: int | None = None  # a share of its one GPU, in millionths (model/shares.py)
    memory_mib: int | None = None  # or: a share holding this much of its GPU's memory


@dataclass(frozen=True)
class BookingChange:
    """An edit of a reservation: None leaves a field as it is."""

    title: str | None = None
    description: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    duration: timedelta | None = None
    gpus: tuple[str, ...] | None = None
    lend: bool | None = None
    reclaim_before_start: bool | None = None
    share: int | None = None  # a new share of its one GPU, in millionths (WHOLE: all of it)
    memory_mib: int | None = None  # or: a share holding this much of its GPU's memory

    @property
    def moves_end(self) -> bool:
        """Whether the edit gives a new end (directly or as a duration)."""
        return self.end is not None or self.duration is not None

    @property
    def only_lending(self) -> bool:
        """Whether the edit changes its lending choice and nothing else (the administrators of
        its hosts may make it too: model/authority.py)."""
        others = (self.title, self.description, self.start, self.end, self.duration, self.gpus,
                  self.share, self.memory_mib)  # fmt: skip
        lending = (self.lend, self.reclaim_before_start)
        return all(v is None for v in others) and any(v is not None for v in lending)


@dataclass(frozen=True)
class JobRequest:
    """A job to create (or preview): GPUs by name, by reservation, or a count in options."""

    name: str
    command: str
    template: str = "plain"
    description: str = ""
    gpus: tuple[str, ...] = ()
    reservation: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    same_host: str | None = None  # given at the top level (it may also be in options)
    vendor: str | None = None  # only this vendor's GPUs ('nvidia', 'amd'; also in options)
    model: str | None = None  # only GPUs whose name holds this, any case (also in options)
    variables: dict[str, str] = field(default_factory=dict)
    sweep: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    queued: bool = False
    walltime: timedelta | None = None
    start_at: datetime | None = None
    stop_at: datetime | None = None
    max_retries: int = 0
    start: bool = False  # run it now (when not queued and not scheduled)
    image: str | None = None  # run each task in this container image (issue #29)
    mounts: tuple[str, ...] = ()  # allowed host paths to mount besides the home
    preemptible: bool = False  # may run on GPUs reservations lend (issue #31)
    preempt_signal: str = "SIGTERM"  # sent when the lender takes the GPUs back
    grace_s: int | None = None  # seconds to checkpoint after it; None: the site's

    def defines(self) -> dict[str, Any]:
        """The values of the fields a stored Job has too (model.jobs.Job), by name: every
        field but those in `REQUEST_ONLY` (where the job runs, how it starts, its container)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in REQUEST_ONLY}


# The JobRequest fields a Job does not keep as they are: the rules turn them into its tasks
# (gpus, reservation, same_host, vendor, model: a count-only job keeps the last three in its
# options), its container (image, mounts), or an action (start).
REQUEST_ONLY = frozenset(
    {"gpus", "reservation", "same_host", "vendor", "model", "start", "image", "mounts"}
)


@dataclass(frozen=True)
class WebhookRequest:
    """A webhook endpoint to add; `events` may hold '*' (every event)."""

    url: str
    format: str = "json"
    events: tuple[str, ...] = ("*",)
    site: bool = False


@dataclass(frozen=True)
class SubscriptionRequest:
    """ "Tell me when `gpus` GPUs are free for `duration` before `deadline`"."""

    duration: timedelta
    gpus: int = 1
    host: str | None = None
    model: str | None = None
    deadline: datetime | None = None  # None: the booking horizon
    channels: tuple[str, ...] | None = None  # None: every channel that reaches the owner
    email: str | None = None
    repeat: bool = False


@dataclass(frozen=True)
class DigestRequest:
    """The daily digest on or off, and where it goes (None: the site's address for the user)."""

    enabled: bool
    email: str | None = None
