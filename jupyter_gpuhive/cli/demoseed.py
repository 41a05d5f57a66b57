"""What `make demo` starts with: other people's bookings this week, a process on a GPU that
someone else reserved (a violation), and a queued job of the demo user.

Seeded through the same services the REST API uses (an admin books for alice and bob), before
JupyterLab starts. Running the demo again adds only what is missing; bookings that would clash
with what is there are left out.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..errors import HiveError
from ..hive import Hive
from ..hosts.vendors import vendor_of
from ..model import UTC, requests, utcnow
from ..model.jobs import TaskState

log = logging.getLogger(__name__)

SPOILER = "gpu3:1"  # where the demo user's stray process runs, on alice's reservation
QUEUED_ON = "gpu3:0"  # where the demo user's queued job waits (alice holds it now)


def bookings(now: datetime, zone: tzinfo) -> list[requests.Booking]:
    """alice and bob this week: one of alice's running now (on gpu3:0,1), the rest ahead."""

    def booking(
        owner: str, title: str, gpus: tuple[str, ...], start: datetime, end: datetime
    ) -> requests.Booking:
        return requests.Booking(
            title, gpus, start.astimezone(UTC), end.astimezone(UTC), owner=owner
        )

    today = now.astimezone(zone).replace(hour=0, minute=0, second=0, microsecond=0)

    def at(days: int, hour: int) -> datetime:
        return (today + timedelta(days=days)).replace(hour=hour)

    return [
        booking("alice", "llama finetune", ("gpu3:0", "gpu3:1"), now - timedelta(minutes=2),
                now + timedelta(hours=3)),
        booking("bob", "eval run", ("gpu3:2",), now + timedelta(hours=4), now + timedelta(hours=6)),
        booking("bob", "ablation sweep", ("gpu2:0", "gpu2:1", "gpu2:2", "gpu2:3"), at(1, 9),
                at(1, 17)),
        booking("alice", "paper deadline", ("gpu1:2", "gpu1:3"), at(2, 10), at(2, 18)),
        booking("bob", "long pretraining", ("gpu2:2", "gpu2:3"), at(4, 8), at(5, 20)),
    ]  # fmt: skip


async def seed(hive: Hive, admin: str, now: datetime | None = None) -> dict[str, Any]:
    """Book for alice and bob (through Bookings.create, as the REST API does: its events
    follow) and queue a job of `admin` (the demo user); what was added."""
    now = now or utcnow()
    who = hive.identities.identify(admin, [])
    made: list[int] = []
    window = (now - timedelta(days=1), now + timedelta(days=8))
    present = {(r.owner, r.title) for r in hive.store.reservations.window(*window)}
    for booking in bookings(now, hive.settings.policy.zone):
        if (booking.owner, booking.title) in present:
            continue
        try:
            made.append((await hive.bookings.create(who, booking)).id)
        except HiveError as error:  # the user booked that slot meanwhile: leave it out
            log.info("demo: not booking %r for %s: %s", booking.title, booking.owner, error)
    job_id = None
    pending = hive.store.jobs.all(owner=admin, queued=True)
    if not any(j.name == "overnight sweep" and j.status == TaskState.PENDING for j in pending):
        decl = hive.pool.hosts.get(QUEUED_ON.split(":")[0])
        pinned = vendor_of(decl.extra if decl else None).pinning.visible
        queued = requests.JobRequest(
            name="overnight sweep",
            template="plain",
            command=f"echo sweeping on ${pinned}; sleep 60; echo done",
            gpus=(QUEUED_ON,),
            queued=True,
            walltime=timedelta(hours=1),
        )
        job, specs = hive.jobs.rules.build(who, queued)
        job_id = hive.store.jobs.create(job, specs).id
    await hive.integrations.settle()  # the bookings' events, before the loop ends
    return {"reservations": made, "job": job_id}


def sidebar_note(user: str) -> str:
    """What the panel says in the demo: where to look."""
    return (
        f"Demo: you are {user} (an admin). alice holds gpu3:0-1 now, and a process of yours "
        f"runs on {SPOILER}: a violation (see the dashboard and violations history). bob books "
        f"gpu2 tomorrow. Your queued job 'overnight sweep' waits for {QUEUED_ON}. Every free "
        "GPU is yours to book."
    )
