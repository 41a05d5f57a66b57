"""The queue's admission pass: pure functions over plain data (no store, no hosts, no clock).

Times are POSIX seconds. The Scheduler (`queue.py`) builds the inputs from the store and the
latest sweep; the benchmarks build them directly.

The pass is conservative backfill. Pending jobs are taken in the queue's order
(`order.queue_order`: the jobs that held a slot in the last pass first, then smallest area
first, aged by waiting time; `fifo` and `by_submission` take them first come, first served).
Each job starts now if GPUs for it are free now until its end (start + walltime): free of
running work, of bookings and planned runs, and of every slot the plan keeps for
other queued jobs. A job that cannot start now gets a *slot*: the earliest time at which
GPUs for it are free for its whole walltime, given the running jobs' walltimes (their
expected release), bookings and the slots of the jobs before it, and no earlier than the
slots of the jobs ahead of it (a later job keeps no slot in a gap in front of an earlier
one), and keeps those GPUs from then on. Later jobs start now only where they end before
every kept slot begins (backfill), so they never delay a job that holds a slot. The first
`depth` waiting jobs (in queue order) hold slots; the rest may only backfill until they
move up. A slot's start is the job's projected start.

Slots persist: the Scheduler hands the last pass's slots back in (`previous`). Each one is
kept while it still fits, and a job's new slot is searched with the others' slots in place,
so it is never later than its old one (conservative backfill with compression). A waiting
job may also start now on GPUs kept for jobs behind it, when each of those gets a new slot
that starts no later than its old one.

Wide jobs (more GPUs than the largest host has) need many GPUs to come free at once, and
their slots, computed from walltimes that overstate runtimes, lie far ahead. While one
waits with a slot, a job behind it may start before it only if its walltime is no longer
than that of every such wide job ahead of it: whatever passes a wide job holds the GPUs no
longer than the wide job itself would.

The guarantee: a job that holds a slot starts no later than that slot's start; its projected
start only moves earlier, whatever is submitted after it. This holds while the inputs keep
their promises: running jobs end by their walltime (the Scheduler stops them then), and no
new booking, foreign process, unreachable host or access rule change takes the slot's GPUs
(then the slot is searched again), and no job is put back ahead of it in the queue (a
requeued or retried one) so far that it falls out of the first `depth`. A job beyond the
first `depth` waits at most until the jobs ahead of it start, then holds a slot. No job
starves, count-only or gang.

Not promised: that no job waits longer than under strict FIFO. Walltimes overstate runtimes
(by 1-3x in the replay benchmark), so a job may pass a waiting one on the strength of its
walltime and still hold GPUs when running work ends early and the waiting one could have
started before its slot. `benchmarks/queue_replay.py` measures it: mean waits far below
FIFO's, and the largest jobs' worst wait (see its docstring for the figures).

Placement:
- Gang semantics: a job gets every GPU it needs at once, or none.
- Named GPUs: exactly those. Count-only jobs get GPUs chosen here, by `same_host`:
  `required` (the default when the count fits on the largest host): all on one host, the
  host where they fit most tightly; it waits for a host rather than being split.
  `preferred` (the default for larger jobs): one host if one can take it, else as few hosts
  as possible. `any`: the fullest hosts first (a host already in use that can take it all,
  else several such hosts), a wholly free host only when those do not suffice, so whole
  hosts stay free for `required` jobs. Within a host, the GPUs whose next booking comes
  soonest while still after the job's end.
- Access rules: a restricted owner's job only gets GPUs the owner may use until its end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import packing
from .order import queue_order, submit_order, walltime, width
from .plan import (
    EPS,
    FOREVER,
    AccessCheck,
    Candidate,
    GpuState,
    Plan,
    Slot,
    placement,
    when,
)

# The job options that ask for N GPUs chosen at admission, and where they may be.
GPU_COUNT = "gpu_count"
SAME_HOST = "same_host"
CHOICE = ("vendor", "model")  # the GPUs it may get (jobs.selection reads them)
ENGINE = "engine"  # a batch system whose own queue places the job (jobs/slurm.py), not ours
PLACEMENTS = ("required", "preferred", "any")
RESERVATION_DEPTH = 32  # waiting jobs that hold a slot in each pass


def gpu_count(options: Mapping[str, Any]) -> int | None:
    """The GPU count a job asks for (`options["gpu_count"]`), or None when it names GPUs."""
    value = options.get(GPU_COUNT)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"'{GPU_COUNT}' must be a whole number of GPUs, at least 1")
    return value


def same_host(options: Mapping[str, Any]) -> str | None:
    """The placement a job asks for (`options["same_host"]`), or None for the default."""
    value = options.get(SAME_HOST)
    if value is None:
        return None
    if value not in PLACEMENTS:
        raise ValueError(f"'{SAME_HOST}' must be one of {', '.join(PLACEMENTS)}")
    return str(value)


def template_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A job's options without the queue's own (what its template validates)."""
    return {k: v for k, v in options.items() if k not in (GPU_COUNT, SAME_HOST, ENGINE, *CHOICE)}


@dataclass(frozen=True, slots=True)
class Admission:
    """A job admitted by the pass and the GPUs it claimed (host, then index order)."""

    job_id: int
    gpus: tuple[str, ...]


@dataclass
class PassResult:
    """The admitted jobs, in order, why each other candidate waits, and the kept slots."""

    admitted: list[Admission] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    planned: dict[int, Slot] = field(default_factory=dict)

    def starts(self, now: float) -> dict[int, float | None]:
        """Each candidate's projected start: now, its slot's start, or None (unknown)."""
        out: dict[int, float | None] = {a.job_id: now for a in self.admitted}
        for job_id in self.waiting:
            slot = self.planned.get(job_id)
            out[job_id] = slot.start if slot is not None else None
        return out


def admit(
    candidates: Iterable[Candidate],
    gpus: Mapping[str, GpuState],
    now: float,
    *,
    access: AccessCheck | None = None,
    reserved: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    previous: Mapping[int, Slot] | None = None,
    depth: int = RESERVATION_DEPTH,
    horizon: float = FOREVER,
    fifo: bool = False,
    by_submission: bool = False,
) -> PassResult:
    """One pass: which candidates start now, on which GPUs, and the slots kept for the
    others (see the module doc). `reserved`: each GPU's booked spans (without it, a GPU
    counts as booked from its `free_until` on); `horizon`: no slot ends after it.
    `fifo`: strict first come, first served (nothing passes a waiting job), for comparison;
    `by_submission`: the same backfill with jobs taken by submission, not by `queue_order`.
    """
    plan = Plan(gpus, now, reserved, horizon)
    if fifo or by_submission:
        jobs = submit_order(candidates)
    else:
        jobs = queue_order(candidates, now, plan.largest, previous or ())
    result = PassResult()
    if previous and not fifo:
        for job in jobs:
            slot = previous.get(job.job_id)
            if slot is not None:
                plan.load(job, slot)
    later = {job.job_id: job for job in jobs}  # the jobs this pass has not reached yet
    failed: dict[tuple[str, bool], dict[int, float]] = {}  # (owner key, one host) -> n -> end
    ahead: int | None = None
    floor = now  # a new slot starts no earlier than the slots of the jobs ahead of it
    wide: Candidate | None = None  # the waiting wide job with the shortest walltime so far
    for job in jobs:
        del later[job.job_id]
        if ahead is not None:
            result.waiting[job.job_id] = f"behind queued job {ahead} (first come, first served)"
            continue
        check = _check(access, job)
        had = plan.slots.get(job.job_id)
        ready = job.not_before <= now
        deep = len(result.waiting) >= depth  # only the first `depth` waiting jobs hold slots
        if not ready:
            chosen, reason = None, f"it starts no earlier than {when(job.not_before)}"
        elif job.memory is not None and (shared := packing.place(plan, job, check)):
            plan.release(job.job_id)  # packed beside other share jobs (packing.py)
            result.admitted.append(Admission(job.job_id, (shared[0].uuid,)))
            continue
        elif job.count:
            chosen, reason = plan.count_now(job, check, None if had else failed)
        else:
            chosen, reason = plan.named_now(job, check)
        held = wide is not None and walltime(job, now) > walltime(wide, now) + EPS
        if chosen is not None and held and wide is not None:
            chosen, reason = None, _behind(wide, now)
        slot = had
        if deep and had is not None:
            plan.release(job.job_id)
            failed.clear()
            slot = had = None
        if chosen is None and not fifo:
            if had is not None:  # only an earlier slot replaces it: never a later one
                slot = plan.search(job, check, before=had.start, after=floor) or had
            elif not deep:
                slot = plan.search(job, check, after=floor)
            if slot is not None and ready and slot.start <= now:
                chosen = plan.free_now(job, slot.gpus, check)
            elif ready and not deep and not held:
                chosen = _overtake(plan, job, check, later, access)
                if chosen is not None:
                    failed.clear()
                    slot = had = None  # released by `_overtake`
        if had is not None and slot is not had:
            plan.release(job.job_id)
            failed.clear()  # its old slot is free again for the jobs after it
        if chosen is not None:
            plan.release(job.job_id)
            plan.claim(job, chosen)
            packing.opened(plan, job, chosen)
            chosen.sort(key=lambda g: (g.host, g.index))
            result.admitted.append(Admission(job.job_id, tuple(g.uuid for g in chosen)))
            continue
        result.waiting[job.job_id] = reason
        if fifo:
            ahead = job.job_id
        elif slot is not None:
            if slot is not had:
                plan.keep(job.job_id, slot)
            result.planned[job.job_id] = slot
            floor = max(floor, slot.start)
            shorter = wide is None or walltime(job, now) < walltime(wide, now)
            if ready and slot.start > now and width(job) > plan.largest and shorter:
                wide = job
    return result


def _behind(wide: Candidate, now: float) -> str:
    """Why a job longer than a waiting wide job does not start before it."""
    minutes = round(walltime(wide, now) / 60)
    span = f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
    return (
        f"queued job {wide.job_id} waits for {width(wide)} GPUs; until it starts, only "
        f"jobs with a walltime up to its own ({span}) may start before it"
    )


def _check(access: AccessCheck | None, job: Candidate) -> AccessCheck | None:
    """The access rules for this job's owner, or None when none apply."""
    return access if access is not None and access.restricted(job.owner) else None


def _overtake(
    plan: Plan,
    job: Candidate,
    check: AccessCheck | None,
    later: Mapping[int, Candidate],
    access: AccessCheck | None,
) -> list[GpuState] | None:
    """GPUs free now for `job` through the slots of jobs behind it in the queue, when each
    of those gets a new slot that starts no later than its old one (kept in the plan; the
    job's own slot is released); None, the plan unchanged, when there are no such GPUs."""
    behind = [j for j in plan.slots if j in later]
    if not behind:
        return None
    found = plan.search(job, check, before=math.nextafter(plan.now, FOREVER), passing=behind)
    if found is None:
        return None
    moved = sorted(plan.holders(found, job.job_id), key=lambda j: (later[j].created, j))
    own = plan.release(job.job_id)
    old = {j: plan.release(j) for j in moved}
    plan.keep(job.job_id, found)
    placed: list[int] = []
    chosen: list[GpuState] | None = None
    for j in moved:
        other, was = later[j], old[j]
        assert was is not None
        limit = math.nextafter(was.start, FOREVER)
        again = plan.search(other, _check(access, other), before=limit)
        if again is None:
            break
        plan.keep(j, again)
        placed.append(j)
    else:
        plan.release(job.job_id)
        chosen = plan.free_now(job, found.gpus, check)
        if chosen is not None:
            return chosen
    for k in (*placed, job.job_id):  # put the plan back as it was
        plan.release(k)
    for j, was in old.items():
        if was is not None:
            plan.keep(j, was)
    if own is not None:
        plan.keep(job.job_id, own)
    return None


__all__ = [
    "ENGINE",
    "GPU_COUNT",
    "PLACEMENTS",
    "RESERVATION_DEPTH",
    "SAME_HOST",
    "AccessCheck",
    "Admission",
    "Candidate",
    "GpuState",
    "PassResult",
    "Slot",
    "admit",
    "gpu_count",
    "placement",
    "same_host",
    "template_options",
]
