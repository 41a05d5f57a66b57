"""Slurm's EASY backfill as a baseline pass, on the same placement rules as gpuhive's pass.

Jobs are taken in priority order, which is submission order. They start in that order
while they can. The first job that cannot start gets a reservation at its shadow time: the
earliest moment the running jobs' time limits (their walltimes) free GPUs for it, on the
GPUs planned for it then. Each later job starts now if GPUs for it are free now and, for
every GPU planned for the first job, it ends (by its own walltime) before the shadow time;
so it either ends before the shadow time or uses none of those GPUs. Nothing else is kept:
the reservation is computed again at each pass (as `sched/backfill` does), and no other
waiting job holds one. Placement (whole hosts for `required` jobs, `preferred`, `any`) is
the gpuhive pass's own (`jobs.plan.Plan`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from jupyter_gpuhive.jobs.admission import Admission, Candidate, GpuState, PassResult
from jupyter_gpuhive.jobs.order import submit_order
from jupyter_gpuhive.jobs.plan import FOREVER, Plan


def easy_admit(
    candidates: Iterable[Candidate],
    gpus: Mapping[str, GpuState],
    now: float,
    reserved: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> PassResult:
    """One EASY-backfill pass: the jobs that start now; the first waiting job's reservation
    (`reserved`: each GPU's booked spans, as the gpuhive pass takes them)."""
    plan = Plan(gpus, now, reserved, FOREVER)
    result = PassResult()
    first = False  # whether the first job that cannot start has its reservation
    for job in submit_order(candidates):
        if job.count:
            chosen, reason = plan.count_now(job, None, None)
        else:
            chosen, reason = plan.named_now(job, None)
        if chosen is None and not first:
            first = True
            slot = plan.search(job, None)
            if slot is not None and slot.start <= now:  # free now after all: start it
                chosen = plan.free_now(job, slot.gpus, None)
            elif slot is not None:
                plan.keep(job.job_id, slot)
                result.planned[job.job_id] = slot
        if chosen is None:
            result.waiting[job.job_id] = reason
            continue
        plan.claim(job, chosen)
        chosen.sort(key=lambda g: (g.host, g.index))
        result.admitted.append(Admission(job.job_id, tuple(g.uuid for g in chosen)))
    return result
