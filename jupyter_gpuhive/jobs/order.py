"""The queue's order: small jobs first, aged by waiting time, slot holders ahead (pure).

Each pending job gets a *queue time*: its submission time plus a delay that grows with its
area (GPUs × walltime, in GPU-hours) and is capped at `AGE_CAP` seconds:

    queue time = created + min(AGE_CAP, AREA_DELAY × GPU-hours)

Jobs are taken by queue time (then submission, then id). This is smallest-area-first with
linear aging: a job of a larger area lets the smaller ones submitted within its delay go
first, and none submitted later than `created + AGE_CAP`, so its place in the queue is
bounded (no job is passed in the order by a job submitted more than `AGE_CAP` after it).
Jobs wider than the largest host keep their submission time as queue time (no delay): they
need many GPUs to come free at once and already wait longest.

Preempted jobs go behind new ones by their attained service (`level`, see `attained`).
Jobs that held a slot in the last pass (`held`) come first, in queue order: a slot, once
kept, is not given up to a job that arrives later in a better place (the slot guarantee of
`admission`). See docs/explanation/queue-order.md.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .plan import Candidate

AGE_CAP = 48 * 3600.0  # seconds: the most a job's area moves it back in the queue
AREA_DELAY = 3600.0  # seconds of delay per GPU-hour of area: an hour
LEVELS_GPU_H = (1.0, 16.0)  # attained GPU-hours at which a preempted job moves a level down
PROMOTE_AFTER = AGE_CAP  # seconds back in the queue after which a job is at level 0 again


def level(attained: float, requeued: float, now: float) -> int:
    """A job's least-attained-service level from its GPU-seconds run (0: new, or back in
    the queue for `PROMOTE_AFTER`); see `attained`."""
    if requeued and now - requeued >= PROMOTE_AFTER:
        return 0
    return sum(1 for t in LEVELS_GPU_H if attained >= t * 3600.0)


def walltime(job: Candidate, now: float) -> float:
    """A job's walltime (seconds) as the pass sees it."""
    return job.end - max(now, job.not_before)


def width(job: Candidate) -> int:
    """How many GPUs a job asks for."""
    return job.count or len(job.gpus)


def queue_time(job: Candidate, now: float, largest_host: int) -> float:
    """When the job counts as submitted for the order: created + its capped area delay."""
    if width(job) > largest_host:
        return job.created
    area = width(job) * walltime(job, now) / 3600.0
    return job.created + min(AGE_CAP, AREA_DELAY * area)


def queue_order(
    candidates: Iterable[Candidate], now: float, largest_host: int, held: Collection[int] = ()
) -> list[Candidate]:
    """The candidates in the pass's order: slot holders first, then by level (attained
    service), then by queue time."""
    return sorted(
        candidates,
        key=lambda c: (
            c.job_id not in held,
            level(c.attained, c.requeued, now),
            queue_time(c, now, largest_host),
            c.created,
            c.job_id,
        ),
    )


def standing(waiting: Mapping[int, str]) -> dict[int, dict[str, Any]]:
    """Each waiting job's place in a pass's order (1: next) and why it waits, from the
    pass's `waiting` (which it fills in its order)."""
    return {
        job_id: {"place": n, "waiting_for": why}
        for n, (job_id, why) in enumerate(waiting.items(), start=1)
    }


def submit_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The candidates first come, first served (created, then id)."""
    return sorted(candidates, key=lambda c: (c.created, c.job_id))


__all__ = [
    "AGE_CAP",
    "AREA_DELAY",
    "LEVELS_GPU_H",
    "PROMOTE_AFTER",
    "level",
    "queue_order",
    "queue_time",
    "submit_order",
    "walltime",
    "width",
]
