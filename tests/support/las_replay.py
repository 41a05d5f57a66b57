"""Preemption in the queue replay (policy `las`): the running preemptible jobs and what each
preemption costs, the grace and the work since the last checkpoint (`queue_trace.replay`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from jupyter_gpuhive.jobs.admission import PassResult
from jupyter_gpuhive.jobs.attained import Runner, Takeover, takeovers
from jupyter_gpuhive.jobs.plan import Candidate, GpuState
from jupyter_gpuhive.jobs.preemption import PREEMPT_PATIENCE, PreemptionSettings

GRACE_S = 30.0  # the site's grace (PreemptionSettings' default)
CHECKPOINT_S = 600.0  # a preemptible job saves a checkpoint every 10 minutes of work
MAX_PREEMPTIONS = PreemptionSettings().max_preemptions  # the bound per job: the site's limit
PREEMPTIBLE_SHARE = 0.5


@dataclass
class Progress:
    """One job's work as the replay keeps it across preemptions."""

    kept: float = 0.0  # seconds of its runtime saved in a checkpoint (where a restart resumes)
    attained: float = 0.0  # GPU-seconds run in earlier runs (lost work included)
    preemptions: int = 0
    requeued: float = 0.0
    lost: float = 0.0  # seconds of work done again


@dataclass
class Runs:
    """The running jobs' runs: when each started and on which GPUs, ends by job."""

    started: dict[int, float] = field(default_factory=dict)
    gpus: dict[int, tuple[str, ...]] = field(default_factory=dict)
    end: dict[int, float] = field(default_factory=dict)  # the end the replay expects now
    progress: dict[int, Progress] = field(default_factory=dict)

    def of(self, job_id: int) -> Progress:
        """The job's progress (new when it never ran)."""
        return self.progress.setdefault(job_id, Progress())

    def attained(self, job_id: int, now: float) -> float:
        """GPU-seconds the job has run, its current run included."""
        run = self.started.get(job_id)
        current = (now - run) * len(self.gpus[job_id]) if run is not None else 0.0
        return self.of(job_id).attained + current


def plan_preemptions(
    result: PassResult,
    pending: Mapping[int, Candidate],
    states: Mapping[str, GpuState],
    runs: Runs,
    preemptible: Mapping[int, bool],
    host_of: Mapping[str, str],
    now: float,
) -> list[Takeover]:
    """The preemptions after a pass, as the Scheduler chooses them (`attained.takeovers`):
    the running preemptible single-host jobs are the runners; the GPUs the pass started jobs
    on are taken."""
    runners = [
        Runner(job_id, host_of[gpus[0]], gpus, runs.attained(job_id, now),
               runs.of(job_id).preemptions)
        for job_id, gpus in runs.gpus.items()
        if preemptible[job_id] and len({host_of[g] for g in gpus}) == 1
    ]  # fmt: skip
    taken = [uuid for a in result.admitted for uuid in a.gpus]
    return takeovers(result, pending, states, runners, now, GRACE_S, MAX_PREEMPTIONS,
                     taken=taken)  # fmt: skip


def stop(runs: Runs, job_id: int, now: float, runtime: float) -> tuple[float, float, float]:
    """Preempt a running job at `now`: when its GPUs are free (the grace, then the kill),
    the work it keeps and the work it lost; its run ends there."""
    progress = runs.of(job_id)
    started = runs.started.pop(job_id)
    gpus = runs.gpus.pop(job_id)
    del runs.end[job_id]
    free_at = now + GRACE_S + PREEMPT_PATIENCE
    reached = min(runtime, progress.kept + free_at - started)
    kept = max(progress.kept, math.floor(reached / CHECKPOINT_S) * CHECKPOINT_S)
    lost = reached - kept
    progress.attained += (free_at - started) * len(gpus)
    progress.kept = kept
    progress.lost += lost
    progress.preemptions += 1
    progress.requeued = free_at
    return free_at, kept, lost
