"""The queue's figures against FIFO and against Slurm's EASY backfill, in one run, per load
(`benchmarks/job_queue.py` prints them; the trace and replay are `queue_trace`'s)."""

from __future__ import annotations

import json
import time
from typing import Any

from jupyter_gpuhive.jobs.order import AGE_CAP

from .las_replay import MAX_PREEMPTIONS
from .queue_trace import PER_HOST, TraceJob, replay, scaled, summary

BASELINE_LOADS = (("busy", 0.85), ("light", 0.50))  # near saturation, and lighter
RATIOS = (  # (key, figure in `summary`, whether higher is better)
    ("mean_wait", "mean_wait_h", False),
    ("mean_jct", "mean_jct_h", False),
    ("largest_class_max_wait", "largest_class_max_wait_h", False),
    ("util", "util", True),
)


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs, 1 when both are 0 (a zero below counts as a second, in hours)."""
    if ours == theirs:
        return 1.0
    return ours / max(theirs, 1 / 3600)


LIVE = "las"  # the policy the Scheduler runs by default (least_attained_service on)


def ratios(ours: dict[str, float], figures: dict[str, dict[str, float]]) -> dict[str, float]:
    """`ours` against FIFO and EASY: each figure of `RATIOS` as `KEY_vs_BASE`."""
    return {
        f"{key}_vs_{base}": round(ratio(ours[figure], figures[base][figure]), 3)
        for base in ("fifo", "easy")
        for key, figure, _ in RATIOS
    }


def at_load(trace: list[TraceJob], hosts: int, name: str) -> dict[str, Any]:
    """The queue as the Scheduler runs it (`las`: the pass and least-attained-service
    preemption of preemptible jobs), FIFO, EASY and the pass without preemption
    (`backfill`: the site's least_attained_service off) on one trace (a line each); the
    ratios of `las` (and, under `without_preemption`, of `backfill`) and the bounds."""
    gpus = hosts * PER_HOST
    figures: dict[str, dict[str, float]] = {}
    passed = late = most = 0
    for policy in (LIVE, "backfill", "fifo", "easy"):
        started = time.process_time()
        out = replay(trace, hosts, policy)
        figures[policy] = summary(trace, out, gpus)
        figures[policy]["cpu_s"] = time.process_time() - started
        if policy in ("backfill", LIVE):
            passed, late = passed + len(out.passed), late + out.late
            most = max(most, max(out.preemptions.values(), default=0))
        shown = {k: round(v, 3) for k, v in figures[policy].items()}
        print(f"replay {name} {policy}: {json.dumps(shown)}", flush=True)
    live = figures[LIVE]
    found: dict[str, Any] = {"policy": LIVE, **ratios(live, figures)}
    found["without_preemption"] = ratios(figures["backfill"], figures)
    found["mean_wait_h"] = {p: round(f["mean_wait_h"], 3) for p, f in figures.items()}
    found["mean_jct_h"] = {p: round(f["mean_jct_h"], 3) for p, f in figures.items()}
    found["max_preemptions_per_job"] = most
    found["preempted_jobs"] = int(live["preempted_jobs"])
    found["lost_h"] = round(live["lost_h"], 2)
    found["starved_jobs"] = passed + late
    found["split_required_jobs"] = int(live["split_required_jobs"] + figures["backfill"]
                                       ["split_required_jobs"])  # fmt: skip
    found["replay_cpu_s"] = {p: round(f["cpu_s"], 1) for p, f in figures.items()}
    return found


def against_baselines(base: list[TraceJob], hosts: int, seed: int = 21) -> dict[str, Any]:
    """Each load's figures (`by_load`) and, at the top, each ratio's worst over the loads."""
    by_load = {
        name: at_load(scaled(base, hosts * PER_HOST, load, seed), hosts, name)
        for name, load in BASELINE_LOADS
    }
    worst: dict[str, Any] = {"policy": LIVE}
    for base_name in ("fifo", "easy"):
        for key, _, higher in RATIOS:
            name = f"{key}_vs_{base_name}"
            values = [figures[name] for figures in by_load.values()]
            worst[name] = min(values) if higher else max(values)
    worst["max_preemptions_per_job"] = max(f["max_preemptions_per_job"] for f in by_load.values())
    worst["preemption_bound"] = MAX_PREEMPTIONS
    worst["starved_jobs"] = sum(f["starved_jobs"] for f in by_load.values())
    worst["wait_order_bound_h"] = AGE_CAP / 3600
    return {**worst, "by_load": by_load}
