"""Where the queue replay's waiting goes: each waiting job's time until the next pass, by what
held it then (docs/explanation/queue-order.md, "Measured").

Run: `.venv/bin/python -m tests.support.wait_causes [busy|light] [POLICY]` (the full-size
trace of `benchmarks/job_queue.py`, seed 21, 64 hosts; `las` by default, or another policy
that runs the real pass: `backfill`, `fifo`). Prints hours per job of the trace by cause and
GPUs asked, then the total and the replay's mean wait.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_gpuhive.jobs.admission import Candidate, GpuState, PassResult

from . import queue_trace
from .queue_figures import BASELINE_LOADS
from .queue_trace import HOUR, PER_HOST, make_trace, replay, scaled, summary

CAUSES = (
    "capacity",  # fewer free GPUs in the whole cluster than it asks
    "kept",  # a host had them free, but kept for other jobs' slots
    "fragmented",  # enough free GPUs, no host with enough (one-host jobs)
    "wide rule",  # behind a waiting wide job with a shorter walltime
    "wide, not placeable",  # a wide job with enough free GPUs in the cluster
    "other",
)


def cause(asks: int, why: str, free: Counter[str], unkept: Counter[str]) -> str:
    """What held a waiting job that asks for `asks` GPUs in one pass (see `CAUSES`)."""
    if asks > sum(free.values()):
        return "capacity"
    if asks > PER_HOST:
        return "wide, not placeable"
    if max(free.values(), default=0) < asks:
        return "fragmented"
    if max(unkept.values(), default=0) < asks:
        return "kept"
    return "wide rule" if "waits for" in why else "other"


class Recorder:
    """Wraps the replay's admission pass and records, per pass, why each job waited."""

    def __init__(self) -> None:
        self.passes: list[tuple[float, list[tuple[int, str]]]] = []
        self._admit = queue_trace.admit

    def __call__(
        self, candidates: Iterable[Candidate], gpus: Mapping[str, GpuState], now: float,
        **kwargs: Any,
    ) -> PassResult:  # fmt: skip
        jobs = list(candidates)
        result = self._admit(jobs, gpus, now, **kwargs)
        taken = {u for a in result.admitted for u in a.gpus}
        kept = {u for slot in result.planned.values() for u in slot.gpus}
        idle = [s for u, s in gpus.items() if s.blocker is None and u not in taken]
        free = Counter(s.host for s in idle)
        unkept = Counter(s.host for s in idle if s.uuid not in kept)
        held = [
            (c.count, cause(c.count, result.waiting[c.job_id], free, unkept))
            for c in jobs
            if c.job_id in result.waiting
        ]
        self.passes.append((now, held))
        return result


def causes(load: str, policy: str = "las", hosts: int = 64, jobs: int = 3000,
           seed: int = 21) -> dict[str, Any]:  # fmt: skip
    """Hours per job of the trace by (cause, GPUs asked), the total and the mean wait."""
    if policy == "easy":
        raise ValueError("the EASY baseline does not run the real pass: nothing to record")
    trace = scaled(make_trace(jobs, seed), hosts * PER_HOST, dict(BASELINE_LOADS)[load], seed)
    recorder = Recorder()
    queue_trace.admit = recorder  # type: ignore[assignment]
    try:
        out = replay(trace, hosts, policy)
    finally:
        queue_trace.admit = recorder._admit
    found: dict[str, float] = defaultdict(float)
    ends = [at for at, _ in recorder.passes[1:]] + [recorder.passes[-1][0]]
    for (at, held), end in zip(recorder.passes, ends, strict=True):
        for asks, why in held:
            size = "1" if asks == 1 else "2-8" if asks <= 8 else "16-32" if asks <= 32 else "64+"
            found[f"{why} ({size} GPUs)"] += (end - at) / HOUR / len(trace)
    return {
        "by_cause": dict(sorted(found.items(), key=lambda kv: -kv[1])),
        "total_h": sum(found.values()),
        "mean_wait_h": summary(trace, out, hosts * PER_HOST)["mean_wait_h"],
    }


def main() -> None:
    load = sys.argv[1] if len(sys.argv) > 1 else "light"
    policy = sys.argv[2] if len(sys.argv) > 2 else "las"
    found = causes(load, policy)
    for name, hours in found["by_cause"].items():
        print(f"{name}: {hours:.3f} h per job")
    print(f"total {found['total_h']:.3f} h; mean wait {found['mean_wait_h']:.3f} h")


if __name__ == "__main__":
    main()
