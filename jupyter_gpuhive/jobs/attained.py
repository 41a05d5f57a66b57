"""Least attained service for preempted jobs, and which running preemptible jobs a waiting
short job may preempt (Tiresias-style, discretised; pure).

A job's *level* counts the thresholds of `LEVELS_GPU_H` its attained service (GPU-hours it has
run, work lost to preemption included) has passed: new jobs are at level 0. The queue's order
takes lower levels first (`order.queue_order`). A job back in the queue for `PROMOTE_AFTER`
seconds returns to level 0, so no job waits unboundedly behind new ones.

A waiting job at level 0 that cannot start now may preempt running preemptible jobs of a higher
level on one host (`victims`): each has been preempted fewer than the bound times, runs on that
host alone, and would hold its GPUs, by its walltime, longer than `PAYS` times the waiting
job's walltime plus the grace: a swap that pays, shortest remaining first, as SRPT has it, with
room for walltimes that overstate runtimes; a job near its end is left to end. The most
remaining work (GPUs × walltime left) goes first. The waiting job takes their GPUs and free
ones of the same host, all of them GPUs that no slot kept for another job (nor a booking) needs
before the waiting job ends, after the grace: no kept slot moves. `takeovers` picks them for
the first waiting jobs of an admission pass: what the Scheduler acts on after each pass
(through the reclaim path: signal, grace, requeue) and what the queue replay models. See
docs/explanation/queue-order.md.
"""

from __future__ import annotations

from collections import ChainMap, Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .admission import PassResult
from .order import LEVELS_GPU_H, PROMOTE_AFTER, level, walltime, width
from .plan import EPS, Candidate, GpuState
from .timeline import FOREVER

PREEMPT_DEPTH = 1000  # the first waiting jobs of a pass's order that may preempt
PAYS = 2.0  # a job is preempted only if its walltime left is over PAYS x the new job's


@dataclass(frozen=True, slots=True)
class Runner:
    """A running preemptible job as `victims` sees it."""

    job_id: int
    host: str  # the one host it runs on
    gpus: tuple[str, ...]
    attained: float  # GPU-seconds run so far, the current run included
    preemptions: int  # times it was preempted already
    release: float | None = None  # when its walltime ends (None: unknown, never)


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
    pays = PAYS * walltime(job, now) + grace
    hosts: dict[str, list[Runner]] = {}
    for r in runners:
        if (
            r.preemptions < bound
            and level(r.attained, 0.0, now) > 0
            and _left(r, now) > pays
            and all(until.get(g, FOREVER) >= end for g in r.gpus)
        ):
            hosts.setdefault(r.host, []).append(r)
    best: tuple[tuple[int, float, float, str], Takeover] | None = None
    for host, group in hosts.items():
        idle = [g for g in free.get(host, ()) if until.get(g, FOREVER) >= end]
        have = list(idle)
        taken: list[Runner] = []
        for r in sorted(
            group, key=lambda r: (-_left(r, now) * len(r.gpus), -r.attained, r.job_id)
        ):  # most work left first
            if len(have) >= need:
                break
            taken.append(r)
            have = [*have, *r.gpus]
        if len(have) < need or not taken:
            continue
        cost = (
            sum(len(r.gpus) for r in taken),
            -sum(_left(r, now) for r in taken),
            -sum(r.attained for r in taken),
            host,
        )
        if best is None or cost < best[0]:
            own = [g for r in taken for g in r.gpus]
            spare = [g for g in idle if g not in own]
            chosen = tuple([*own, *spare][:need])
            best = (cost, Takeover(job.job_id, host, tuple(r.job_id for r in taken), chosen))
    return best[1] if best else None


def _left(runner: Runner, now: float) -> float:
    """Seconds a runner holds its GPUs still, by its walltime (unknown: for ever)."""
    return FOREVER if runner.release is None else runner.release - now


def takeovers(
    result: PassResult,
    pending: Mapping[int, Candidate],
    gpus: Mapping[str, GpuState],
    runners: Iterable[Runner],
    now: float,
    grace: float,
    bound: int,
    *,
    taken: Collection[str] = (),
    usable: Callable[[Candidate, str, float], bool] | None = None,
    skip: Collection[int] = (),
    depth: int = PREEMPT_DEPTH,
) -> list[Takeover]:
    """The preemptions after an admission pass (`result`, over `pending`): each of the first
    `depth` waiting jobs of its order, in that order, may take running preemptible jobs'
    GPUs (`victims`), except a job the wide-job rule holds back (a waiting wide job with a
    shorter walltime is ahead of it: see `admission`) and the jobs in `skip`. `gpus`: the
    pass's GPU states (free now: no blocker, not `taken` by a job started after the pass;
    each GPU's next booking is its `free_until`); `usable(job, uuid, end)`: whether the job
    may have that GPU until `end` (access rules, health). A job that names a vendor or model
    gets only those GPUs; a share job (`memory`) preempts nothing. The slots the pass kept,
    the job's own aside, are never taken."""
    left = [r if r.release is not None else replace(r, release=_release(r, gpus))
            for r in runners]  # fmt: skip
    if not left or not result.waiting:
        return []
    largest = max(Counter(g.host for g in gpus.values()).values(), default=0)
    busy = set(taken)
    free: dict[str, list[str]] = {}
    for uuid, state in gpus.items():
        if state.blocker is None and uuid not in busy:
            free.setdefault(state.host, []).append(uuid)
    kept: dict[str, list[tuple[float, int]]] = {}  # GPU -> (start, job) of the slots on it
    for other, held_slot in result.planned.items():
        for uuid in held_slot.gpus:
            kept.setdefault(uuid, []).append((held_slot.start, other))
    until = {u: s.free_until for u, s in gpus.items() if s.free_until < FOREVER}
    for uuid, slots in kept.items():
        slots.sort()
        until[uuid] = min(until.get(uuid, FOREVER), slots[0][0])
    out: list[Takeover] = []
    wide: Candidate | None = None  # as in `admission.admit`: the shortest waiting wide job
    for n, job_id in enumerate(result.waiting):
        if n >= depth or not left:
            break
        job = pending[job_id]
        held = wide is not None and walltime(job, now) > walltime(wide, now) + EPS
        slot = result.planned.get(job_id)
        ready = job.not_before <= now
        shorter = wide is None or walltime(job, now) < walltime(wide, now)
        if slot is not None and ready and slot.start > now and width(job) > largest and shorter:
            wide = job
        if held or not ready or job_id in skip or not job.count or job.memory is not None:
            continue  # (a share job is packed beside others, never given a whole host)
        mine = _own_until(job_id, slot.gpus if slot else (), kept, gpus)
        bounds = ChainMap(mine, until)
        end = now + grace + walltime(job, now)
        if usable is not None or job.only is not None:
            ok = _may_use(job, end, usable)
            group = [r for r in left if all(ok(g) for g in r.gpus)]
            spare = {h: [g for g in gs if ok(g)] for h, gs in free.items()}
        else:
            group, spare = left, free
        found = victims(job, now, grace, spare, bounds, group, bound)
        if found is None:
            continue
        out.append(found)
        gone = set(found.victims)
        left = [r for r in left if r.job_id not in gone]
        free[found.host] = [g for g in free.get(found.host, []) if g not in found.gpus]
    return out


def _release(runner: Runner, gpus: Mapping[str, GpuState]) -> float | None:
    """When a runner's GPUs are expected back (its walltime's end, as the pass's states
    have it), or None."""
    found: list[float] = []
    for uuid in runner.gpus:
        state = gpus.get(uuid)
        if state is None or state.release is None:
            return None
        found.append(state.release)
    return max(found, default=None)


def _own_until(
    job_id: int,
    own: Sequence[str],
    kept: Mapping[str, list[tuple[float, int]]],
    gpus: Mapping[str, GpuState],
) -> dict[str, float]:
    """On the GPUs of a job's own slot, when the next other slot or booking needs them."""
    out = {}
    for uuid in own:
        others = [at for at, holder in kept.get(uuid, ()) if holder != job_id]
        state = gpus.get(uuid)
        out[uuid] = min([*others, state.free_until if state else FOREVER])
    return out


def _may_use(
    job: Candidate, end: float, usable: Callable[[Candidate, str, float], bool] | None
) -> Callable[[str], bool]:
    def ok(uuid: str) -> bool:
        if job.only is not None and uuid not in job.only:
            return False
        return usable is None or usable(job, uuid, end)

    return ok


__all__ = [
    "LEVELS_GPU_H",
    "PAYS",
    "PREEMPT_DEPTH",
    "PROMOTE_AFTER",
    "Runner",
    "Takeover",
    "level",
    "takeovers",
    "victims",
]
