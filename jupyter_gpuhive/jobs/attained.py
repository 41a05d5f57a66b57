"""Least attained service for preempted jobs, and which running preemptible jobs a waiting
short job may preempt (Tiresias-style, discretised; pure).

A job's *level* counts the thresholds of `LEVELS_GPU_H` its attained service (GPU-hours it has
run, work lost to preemption included) has passed: new jobs are at level 0. The queue's order
takes lower levels first (`order.queue_order`). A job back in the queue for `PROMOTE_AFTER`
seconds returns to level 0, so no job waits unboundedly behind new ones.

A waiting job at level 0 that cannot start now may preempt running preemptible jobs of a
higher level on one host (`victims`): each has been preempted fewer than the bound times and
runs on that host alone. The waiting job takes their GPUs and free ones of the same host, all
of them GPUs that no slot kept for another job (nor a booking) needs before the waiting job
ends, after the grace: no kept slot moves. See docs/explanation/queue-order.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .order import LEVELS_GPU_H, PROMOTE_AFTER, level, walltime, width
from .plan import Candidate
from .timeline import FOREVER


@dataclass(frozen=True, slots=True)
class Runner:
    """A running preemptible job as `victims` sees it."""

    job_id: int
    host: str  # the one host it runs on
    gpus: tuple[str, ...]
    attained: float  # GPU-seconds run so far, the current run included
    preemptions: int  # times it was preempted already


@dataclass(frozen=True, slots=True)
class Takeover:
    """A waiting job's way in: the jobs to preempt and the GPUs it then takes."""

    job_id: int
    host: str
    victims: tuple[int, ...]
    gpus: tuple[str, ...]  # the victims' GPUs it needs, then free ones of the host


def victims(
    job: Candidate,
    now: float,
    grace: float,
    free: Mapping[str, Sequence[str]],
    until: Mapping[str, float],
    runners: Iterable[Runner],
    bound: int,
) -> Takeover | None:
    """The fewest preempted GPUs that let `job` start once the grace is over (see the module
    doc); `free`: per host, the GPUs free now; `until`: per GPU, when another job's kept
    slot or a booking needs it (absent: never). None when the job is not at level 0 or no
    host has enough."""
    if level(job.attained, job.requeued, now) > 0 or job.gpus:
        return None
    need = width(job)
    end = now + grace + walltime(job, now)
    hosts: dict[str, list[Runner]] = {}
    for r in runners:
        if (
            r.preemptions < bound
            and level(r.attained, 0.0, now) > 0
            and all(until.get(g, FOREVER) >= end for g in r.gpus)
        ):
            hosts.setdefault(r.host, []).append(r)
    best: tuple[tuple[int, float, str], Takeover] | None = None
    for host, group in hosts.items():
        idle = [g for g in free.get(host, ()) if until.get(g, FOREVER) >= end]
        have = list(idle)
        taken: list[Runner] = []
        for r in sorted(group, key=lambda r: (-r.attained, r.job_id)):  # most served first
            if len(have) >= need:
                break
            taken.append(r)
            have = [*have, *r.gpus]
        if len(have) < need or not taken:
            continue
        cost = (sum(len(r.gpus) for r in taken), -sum(r.attained for r in taken), host)
        if best is None or cost < best[0]:
            own = [g for r in taken for g in r.gpus]
            spare = [g for g in idle if g not in own]
            chosen = tuple([*own, *spare][:need])
            best = (cost, Takeover(job.job_id, host, tuple(r.job_id for r in taken), chosen))
    return best[1] if best else None


__all__ = ["LEVELS_GPU_H", "PROMOTE_AFTER", "Runner", "Takeover", "level", "victims"]
