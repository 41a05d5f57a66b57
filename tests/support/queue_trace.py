"""The queue-replay model: a synthetic production-like trace and its replay through the real
admission pass in simulated time (`benchmarks/queue_replay.py` prints it, `tests/jobs` checks it)."""

from __future__ import annotations

import heapq
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field, replace

from jupyter_gpuhive.jobs.admission import (
    RESERVATION_DEPTH,
    Candidate,
    GpuState,
    PassResult,
    Slot,
    admit,
    placement,
)
from jupyter_gpuhive.jobs.order import AGE_CAP, PROMOTE_AFTER
from jupyter_gpuhive.jobs.preemption import PREEMPT_PATIENCE

from .easy_backfill import easy_admit
from .las_replay import GRACE_S, PREEMPTIBLE_SHARE, Runs, plan_preemptions, stop

PER_HOST = 8
SIZES = ((1, 0.52), (2, 0.12), (4, 0.12), (8, 0.16), (16, 0.035), (32, 0.022), (64, 0.015),
         (128, 0.008))  # fmt: skip
LARGEST_CLASS = (64, 128)
LOADS = (("light", 0.50), ("busy", 0.85), ("overloaded", 1.15))
POLICIES = ("backfill", "fifo", "greedy")
# backfill: the real pass (queue order); submission: the same, first come first served;
# easy: Slurm's EASY backfill (`easy_backfill`); fifo: strict; greedy: no slots (depth 0);
# las: the real pass and least-attained-service preemption of preemptible jobs (`las_replay`)
MIN, HOUR, DAY = 60.0, 3600.0, 86400.0


@dataclass(frozen=True)
class TraceJob:
    job_id: int
    submit: float
    gpus: int
    runtime: float
    walltime: float
    same_host: str | None
    group: int = 0  # the sweep it belongs to (copies share one submission)
    preemptible: bool = False  # it checkpoints and may be preempted (a sweep's copies alike)


def make_trace(n: int, seed: int = 21) -> list[TraceJob]:
    """The trace's jobs, without times yet (`submit` is the copy's place in its sweep)."""
    rng = random.Random(seed)
    sizes, weights = zip(*SIZES, strict=True)
    out: list[TraceJob] = []
    group = 0
    while len(out) < n:
        gpus = rng.choices(sizes, weights)[0]
        median = 15 * MIN * (1 + math.log2(gpus))
        runtime = min(5 * DAY, max(2 * MIN, rng.lognormvariate(math.log(median), 1.7)))
        copies = rng.randint(4, 24) if rng.random() < 0.2 else 1
        asked = None
        if gpus <= PER_HOST:
            roll = rng.random()
            asked = "any" if roll < 0.10 else "preferred" if roll < 0.15 else None
        walltime = min(7 * DAY, math.ceil(runtime * rng.uniform(1, 3) / 300) * 300)
        for k in range(copies):  # a sweep: one walltime, runtimes that differ a little
            run = runtime * (rng.uniform(0.8, 1) if copies > 1 else 1)
            out.append(TraceJob(len(out) + 1, float(k), gpus, run, walltime, asked, group))
        group += 1
    return [preemptible(j, seed) for j in out[:n]]


def preemptible(job: TraceJob, seed: int) -> TraceJob:
    """The job marked preemptible or not, by its sweep (a stream of its own: the trace's
    sizes, runtimes and times are those of before)."""
    roll = random.Random(f"{seed}-preemptible-{job.group}").random()
    return replace(job, preemptible=roll < PREEMPTIBLE_SHARE)


def timed(trace: list[TraceJob], per_hour: float, seed: int = 21) -> list[TraceJob]:
    """Submission times: one submission (a job, or a sweep's copies within two minutes) at
    a time from a Poisson process of `per_hour` on average, modulated by a daily cycle and
    by bursts (see the module doc)."""
    rng = random.Random(seed + 1)
    t, burst_until, next_burst = 0.0, -1.0, rng.expovariate(1 / (3 * HOUR))
    at: dict[int, float] = {}
    out = []
    for job in trace:
        if job.group not in at:
            if t >= next_burst:
                burst_until = t + rng.expovariate(1 / (20 * MIN))
                next_burst = burst_until + rng.expovariate(1 / (3 * HOUR))
            rate = per_hour / HOUR * (2 + math.sin(2 * math.pi * (t / DAY - 0.35))) / 2.4
            t += rng.expovariate(rate * (6 if t < burst_until else 1))
            at[job.group] = t
        submit = at[job.group] + job.submit * rng.uniform(0, 5)  # copies within ~2 min
        out.append(replace(job, submit=submit))
    first = min(j.submit for j in out)
    return sorted(
        (replace(j, submit=j.submit - first) for j in out), key=lambda j: (j.submit, j.job_id)
    )


def scaled(trace: list[TraceJob], gpus: int, load: float, seed: int = 21) -> list[TraceJob]:
    """The trace at the submission rate at which the work offered within the submission
    period (each job's runtime up to the period's end) / capacity = load."""

    def offered(timed_trace: list[TraceJob]) -> float:
        end = timed_trace[-1].submit
        work = sum(j.gpus * min(j.runtime, end - j.submit) for j in timed_trace)
        return work / (gpus * end)

    low, high = 1e-2, 1e5  # submissions per hour; offered() grows with it: bisect (log scale)
    for _ in range(40):
        mid = math.sqrt(low * high)
        low, high = (low, mid) if offered(timed(trace, mid, seed)) > load else (mid, high)
    return timed(trace, math.sqrt(low * high), seed)


@dataclass
class Outcome:
    waits: dict[int, float] = field(default_factory=dict)
    hosts_used: dict[int, int] = field(default_factory=dict)
    pass_ms: list[float] = field(default_factory=list)
    late: int = 0  # started after the first projected start
    passed: set[int] = field(default_factory=set)  # passed by a job submitted AGE_CAP later
    busy_in_window: float = 0.0  # useful GPU-seconds (work lost to preemption left out)
    ends: dict[int, float] = field(default_factory=dict)  # when each job completed
    preemptions: dict[int, int] = field(default_factory=dict)
    lost: float = 0.0  # seconds of work done again after preemptions


def gpu_states(
    uuids: dict[str, tuple[str, int]], holder: dict[str, tuple[int, float]]
) -> dict[str, GpuState]:
    """The GPUs as the pass sees them: free, or running a job until its walltime."""
    out = {}
    for uuid, (host, index) in uuids.items():
        ref = f"{host}:{index}"
        if uuid in holder:
            job, release = holder[uuid]
            out[uuid] = GpuState(uuid, host, index, ref, f"{ref} runs job {job}", release=release)
        else:
            out[uuid] = GpuState(uuid, host, index, ref)
    return out


def passed_beyond_cap(
    pending: dict[int, TraceJob], previous: dict[int, Slot], result: PassResult
) -> set[int]:
    """The waiting jobs without a slot that a job submitted more than AGE_CAP after them
    passed in this pass, by taking a new slot (the order's bound says none)."""
    started = {a.job_id for a in result.admitted}
    unslotted = [j for i, j in pending.items() if i not in result.planned and i not in started]
    if not unslotted:
        return set()
    oldest = min(j.submit for j in unslotted)
    newest = max((pending[i].submit for i in result.planned if i not in previous), default=0.0)
    if newest - AGE_CAP <= oldest:
        return set()
    return {j.job_id for j in unslotted if j.submit < newest - AGE_CAP}


def replay(trace: list[TraceJob], hosts: int, policy: str, depth: int | None = None) -> Outcome:
    """Discrete-event replay: submissions and job ends, one admission pass after each
    (`depth`: the slots the pass keeps, default the Scheduler's); with `las`, preemptions
    after each pass (`las_replay`), the preempted jobs back in the queue at their old place."""
    names = [f"node{h:03d}" for h in range(hosts)]
    uuids = {f"GPU-{h:03d}-{i}": (names[h], i) for h in range(hosts) for i in range(PER_HOST)}
    host_of = {u: h for u, (h, _) in uuids.items()}
    by_id = {j.job_id: j for j in trace}
    window = (trace[0].submit, trace[-1].submit)
    events: list[tuple[float, int, int]] = [(j.submit, 1, j.job_id) for j in trace]
    heapq.heapify(events)
    pending: dict[int, TraceJob] = {}
    entered = {j.job_id: j.submit for j in trace}  # when it last went (back) into the queue
    holder: dict[str, tuple[int, float]] = {}  # GPU -> (job, release at its walltime)
    runs = Runs()
    freeing: dict[int, list[str]] = {}  # a preempted job's GPUs nobody takes, freed at the kill
    first_estimate: dict[int, float] = {}
    plan: dict[int, Slot] = {}
    ticks: set[float] = set()
    out = Outcome()
    fifo = policy == "fifo"
    depth = 0 if policy == "greedy" else RESERVATION_DEPTH if depth is None else depth

    def start(job: TraceJob, gpus: tuple[str, ...], at: float) -> None:
        progress = runs.of(job.job_id)
        for uuid in gpus:
            holder[uuid] = (job.job_id, at + job.walltime)
        runs.started[job.job_id], runs.gpus[job.job_id] = at, gpus
        out.waits[job.job_id] = out.waits.get(job.job_id, 0.0) + at - entered[job.job_id]
        out.hosts_used[job.job_id] = len({host_of[u] for u in gpus})
        end = at + job.runtime - progress.kept
        runs.end[job.job_id] = end
        out.busy_in_window += max(0.0, min(end, window[1]) - max(at, window[0])) * job.gpus
        heapq.heappush(events, (end, 0, job.job_id))

    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, job_id = heapq.heappop(events)
            if kind == 1:
                pending[job_id] = by_id[job_id]
            elif kind == 0 and runs.end.get(job_id) == now:
                for uuid in runs.gpus.pop(job_id):
                    if holder.get(uuid, (job_id,))[0] == job_id:  # not taken by a preemptor
                        del holder[uuid]
                del runs.started[job_id], runs.end[job_id]
                out.ends[job_id] = now
            elif kind == 3:
                for uuid in freeing.pop(job_id):
                    del holder[uuid]
        if not pending:
            continue
        states = gpu_states(uuids, holder)
        candidates = {
            j.job_id: Candidate(
                j.job_id, "u", j.submit, now + j.walltime, count=j.gpus, same_host=j.same_host,
                attained=runs.of(j.job_id).attained, requeued=runs.of(j.job_id).requeued,
            )
            for j in pending.values()
        }  # fmt: skip
        started = time.process_time()
        if policy == "easy":
            result = easy_admit(candidates.values(), states, now)
        else:
            result = admit(candidates.values(), states, now, previous=plan, depth=depth,
                           fifo=fifo, by_submission=policy == "submission")  # fmt: skip
        out.pass_ms.append((time.process_time() - started) * 1000)
        if policy not in ("easy", "fifo"):
            out.passed |= passed_beyond_cap(waiting_view(pending, runs), plan, result)
        plan = result.planned
        for job_id, slot in plan.items():
            first_estimate.setdefault(job_id, slot.start)
        due = min((slot.start for slot in plan.values() if slot.start > now), default=None)
        if due is not None and due not in ticks:  # the Scheduler ticks every few seconds
            ticks.add(due)
            heapq.heappush(events, (due, 2, 0))
        for admission in result.admitted:
            job = pending.pop(admission.job_id)
            if now > first_estimate.get(job.job_id, math.inf) + 1e-6:
                out.late += 1
            start(job, admission.gpus, now)
        if policy != "las":
            continue
        flags = {j: by_id[j].preemptible for j in runs.gpus}
        for way in plan_preemptions(result, candidates, states, runs, flags, host_of, now):
            at = now
            for victim in way.victims:
                if runs.end[victim] <= now + GRACE_S + PREEMPT_PATIENCE:
                    at = max(at, runs.end[victim])  # it ends within the grace anyway
                    continue
                gpus = runs.gpus[victim]
                planned_end = runs.end[victim]
                free_at, _, lost = stop(runs, victim, now, by_id[victim].runtime)
                at = max(at, free_at)
                useful = max(0.0, min(planned_end, window[1]) - max(free_at - lost, window[0]))
                out.busy_in_window -= useful * by_id[victim].gpus
                out.preemptions[victim] = runs.of(victim).preemptions
                out.lost += lost
                entered[victim] = free_at
                first_estimate.pop(victim, None)
                heapq.heappush(events, (free_at, 1, victim))
                rest = [u for u in gpus if u not in way.gpus]
                if rest:
                    freeing[victim] = rest
                    for uuid in rest:
                        holder[uuid] = (victim, free_at)
                    heapq.heappush(events, (free_at, 3, victim))
            job = pending.pop(way.job_id)
            plan.pop(way.job_id, None)
            start(job, way.gpus, at)
    return out


def waiting_view(pending: dict[int, TraceJob], runs: Runs) -> dict[int, TraceJob]:
    """The waiting jobs for the order's bound: a preempted job counts from the moment it is
    at level 0 again (`PROMOTE_AFTER` after its requeue), when the order's bound takes over."""
    out = {}
    for job_id, job in pending.items():
        back = runs.of(job_id).requeued
        out[job_id] = replace(job, submit=max(job.submit, back + PROMOTE_AFTER)) if back else job
    return out


def summary(trace: list[TraceJob], out: Outcome, gpus: int) -> dict[str, float]:
    by_id = {j.job_id: j for j in trace}
    big = [w for i, w in out.waits.items() if LARGEST_CLASS[0] <= by_id[i].gpus]
    split = sum(
        1 for i, n in out.hosts_used.items()
        if n > 1 and placement(by_id[i].gpus, by_id[i].same_host, PER_HOST) == "required"
    )  # fmt: skip
    span = trace[-1].submit - trace[0].submit
    passes = sorted(out.pass_ms)
    return {
        "mean_wait_h": statistics.fmean(out.waits.values()) / HOUR,
        "mean_jct_h": statistics.fmean(out.ends[i] - by_id[i].submit for i in out.waits) / HOUR,
        "max_wait_h": max(out.waits.values()) / HOUR,
        "largest_class_max_wait_h": max(big, default=0.0) / HOUR,
        "largest_class_mean_wait_h": statistics.fmean(big) / HOUR if big else 0.0,
        "largest_class_jobs": len(big),
        "util": out.busy_in_window / (gpus * span),
        "split_required_jobs": split,
        "admit_p99_ms": passes[min(len(passes) - 1, int(0.99 * len(passes)))],
        "passes": len(passes),
        "late_vs_projection": out.late,
        "preempted_jobs": len(out.preemptions),
        "max_preemptions": max(out.preemptions.values(), default=0),
        "lost_h": out.lost / HOUR,
    }


def compare(
    base: list[TraceJob], hosts: int, policies: tuple[str, ...] = POLICIES, seed: int = 21
) -> dict[str, float]:
    """Replay the trace at each load under each policy (printing a line each); the final
    figures, each the worst over the loads."""
    gpus = hosts * PER_HOST
    ratios: dict[str, list[float]] = {"mean": [], "big": [], "util": []}
    split, p99 = 0, 0.0
    for name, load in LOADS:
        trace = scaled(base, gpus, load, seed)
        print(f"{name}: submissions over {trace[-1].submit / 3600:.1f} h", flush=True)
        figures = {}
        for policy in policies:
            started = time.process_time()
            figures[policy] = summary(trace, replay(trace, hosts, policy), gpus)
            figures[policy]["cpu_s"] = time.process_time() - started
            shown = {k: round(v, 3) for k, v in figures[policy].items()}
            print(f"{name} ({load:.0%}) {policy}: {json.dumps(shown)}", flush=True)
        bf, ff = figures["backfill"], figures["fifo"]
        ratios["mean"].append(bf["mean_wait_h"] / ff["mean_wait_h"] if ff["mean_wait_h"] else 1)
        big_fifo = ff["largest_class_max_wait_h"]
        big = bf["largest_class_max_wait_h"]
        ratios["big"].append(big / big_fifo if big_fifo else (1.0 if big == 0 else math.inf))
        ratios["util"].append(bf["util"] / ff["util"])
        split += int(bf["split_required_jobs"] + ff["split_required_jobs"])
        p99 = max(p99, bf["admit_p99_ms"])
    return {
        "mean_wait_ratio_vs_fifo": round(max(ratios["mean"]), 3),
        "max_wait_ratio_vs_fifo_largest_class": round(max(ratios["big"]), 3),
        "util_ratio_vs_fifo": round(min(ratios["util"]), 3),
        "split_required_jobs": split,
        "admit_p99_ms": round(p99, 2),
    }
