"""Preemptible lending: useful GPU-hours with and without lending reserved-but-idle GPUs (#31).

Run: `.venv/bin/python benchmarks/preemption.py [--smoke] [--seed N] [--no-live]`. The last
line printed is one JSON object; both runs' figures go to stderr.

Two parts.

1. A replay in simulated time (this file), through the REAL admission pass: each event is
   followed by the Scheduler's first pass (`jobs.admission.admit` over unbooked time, with
   the kept slots) and, with lending, its second pass for preemptible jobs over lent GPUs
   (`jobs.preemption.lending_states`, then `admit` again with depth 0), as `jobs/queue.py`
   does. The workload:
   - a cluster of 8-GPU hosts (16; 4 with --smoke); every host is two 4-GPU blocks, and each
     block is booked back to back: bookings of U(2, 10) h with gaps of U(0.5, 3) h between
     them, so bookings cover about three quarters of the cluster's time. One booking in ten
     opts out of lending (`lend: false`);
   - each holder uses about 70 % of the booked GPU-hours, as the seeds report: they start
     U(0, 40) % of the booking late, end U(0, 10) % early, and two bookings in five pause in
     the middle for U(5, 20) % of it. While the holder has no process on the GPUs they lend;
   - a queue of checkpointing jobs: the queue replay's trace (`tests/support/queue_trace.py`,
     same seed) cut to jobs of at most one host, runtimes capped at 12 h, submitted at the
     rate at which they offer 60 % of the cluster's capacity; every job is preemptible and
     saves a checkpoint every CHECKPOINT_S seconds of work and when it gets the signal. Its
     steps last a log-normal time (median 5 s, sigma 1) and a save U(0.5, 5) s.
   A holder's process that appears on GPUs lent to a job reclaims them: the job gets the
   signal, finishes its step and saves if that fits in the grace (GRACE_S); otherwise it is
   killed after the grace and the kill patience and resumes from its last periodic save
   (the work since then is done again: lost). The holder waits until the GPUs are free. A
   job goes back to the queue at its old place; after MAX_PREEMPTIONS it runs in unbooked
   time only. Useful work: the holders' GPU-seconds plus the jobs' GPU-seconds of progress
   they keep (not the work redone after a resume, nor the time spent saving), within the
   submission period. `util_ratio_vs_no_lending` is useful work with lending / without.

2. The live part (`benchmarks/preemption_live.py`, `measure(smoke)`): real processes on a
   simulated host (a job of the checkpoint helper, a holder's process, the real reclaim),
   which gives `holder_wait_p99_s` and `violations_against_holders`, and a measured lost
   work per preemption (the JSON takes the live one when the live part ran; stderr shows
   both).

The JSON: `util_ratio_vs_no_lending` (replay), `holder_wait_p99_s` and
`violations_against_holders` (live; null when the live part could not run: they are never
taken from the model), `lost_work_per_preemption_s` (live, else the replay's), each part's
grace and checkpoint interval (`live_*`, `replay_*`) and the replay's own holder wait and lost
work (`replay_*`).

Not modelled: bookings that ask for `reclaim_before_start` (the GPUs come back before the
start, so the holder never waits), holders that start a gpuhive job (the same reclaim), and the
no-show release of idle bookings (it would shorten the bookings that lend).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.lending_replay import CHECKPOINT_S, GRACE_S, Replay, workload
from tests.support.queue_trace import HOUR, PER_HOST


def replay_figures(hosts: int, jobs: int, seed: int) -> dict[str, Any]:
    """Both runs over the same workload, printed on stderr; the replay's figures."""
    bookings, work, period = workload(hosts, jobs, seed)
    capacity = hosts * PER_HOST * period
    booked = sum(
        (min(b.res.end.timestamp(), period) - b.res.start.timestamp()) * len(b.res.gpus)
        for b in bookings
        if b.res.start.timestamp() < period
    )
    used = sum(
        (min(high, period) - low) * len(b.res.gpus)
        for b in bookings
        for low, high in b.uses
        if low < period
    )
    say(f"cluster {hosts} hosts x {PER_HOST} GPUs; {len(work)} checkpointing jobs over "
        f"{period / HOUR:.1f} h; {len(bookings)} bookings cover {booked / capacity:.0%} of the "
        f"GPU-hours, {1 - used / booked:.0%} of the booked GPU-hours unused")  # fmt: skip
    results = {}
    for lend in (False, True, "easy"):
        started = time.process_time()
        out = Replay(bookings, work, period, lend is True, easy=lend == "easy").run()
        useful = out.holder_s + out.useful_job_s
        passes = sorted(out.pass_ms)
        results[lend] = {
            "useful_gpu_h": round(useful / HOUR, 1),
            "holders_gpu_h": round(out.holder_s / HOUR, 1),
            "jobs_useful_gpu_h": round(out.useful_job_s / HOUR, 1),
            "util": round(useful / capacity, 3),
            "jobs_finished": out.finished,
            "borrowed_starts": out.borrowed_starts,
            "preemptions": len(out.lost),
            "lost_work_per_preemption_s": round(statistics.fmean(out.lost), 1) if out.lost else 0,
            "lost_work_max_s": round(max(out.lost, default=0.0), 1),
            "holder_wait_p99_s": round(percentile(out.waits, 0.99), 2),
            "holder_wait_max_s": round(max(out.waits, default=0.0), 2),
            "saving_gpu_h": round(out.saves_s / HOUR, 2),
            "admit_p99_ms": round(passes[min(len(passes) - 1, int(0.99 * len(passes)))], 2),
            "cpu_s": round(time.process_time() - started, 1),
        }
        name = "EASY backfill, without" if lend == "easy" else "with" if lend else "without"
        say(f"replay, {name} lending: {json.dumps(results[lend])}")
    ratio = results[True]["useful_gpu_h"] / results[False]["useful_gpu_h"]
    easy = results[True]["useful_gpu_h"] / results["easy"]["useful_gpu_h"]
    return {"ratio": ratio, "vs_easy": easy, "with": results[True], "without": results[False],
            "easy": results["easy"]}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def live_figures(smoke: bool) -> dict[str, Any] | None:
    """The live part's figures, or None when `benchmarks/preemption_live.py` is missing."""
    try:
        from benchmarks import preemption_live
    except ImportError as error:
        say(f"live part not run: {error}")
        return None
    figures: dict[str, Any] = preemption_live.measure(smoke)
    say(f"live (real processes): {json.dumps(figures)}")
    return figures


def live_interval() -> float | None:
    """The live job's checkpoint interval (its steps between saves times a step's length)."""
    from benchmarks import preemption_live

    every, step = (getattr(preemption_live, n, None) for n in ("SAVE_EVERY", "STEP_S"))
    return round(every * step, 3) if every is not None and step is not None else None


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="4 hosts, 150 jobs: that it runs")
    parser.add_argument("--seed", type=int, default=21, help="the workload's seed (default 21)")
    parser.add_argument("--no-live", action="store_true", help="the replay only")
    args = parser.parse_args()
    hosts, jobs = (4, 150) if args.smoke else (16, 1200)
    replay = replay_figures(hosts, jobs, args.seed)
    live = None if args.no_live else live_figures(args.smoke)
    lost = replay["with"]["lost_work_per_preemption_s"]
    figures: dict[str, Any] = {
        "util_ratio_vs_no_lending": round(replay["ratio"], 3),
        "util_ratio_vs_easy": round(replay["vs_easy"], 3),  # lending vs EASY, no lending
        "easy_jobs_finished": replay["easy"]["jobs_finished"],
        "jobs_finished": replay["with"]["jobs_finished"],
        "holder_wait_p99_s": None,  # measured on real processes only (the live part)
        "lost_work_per_preemption_s": lost,
        "violations_against_holders": None,  # likewise
        "replay_grace_s": GRACE_S,
        "replay_checkpoint_interval_s": CHECKPOINT_S,
        "replay_holder_wait_p99_s": replay["with"]["holder_wait_p99_s"],
        "replay_lost_work_per_preemption_s": lost,
        "replay_lost_work_max_s": replay["with"]["lost_work_max_s"],
    }
    if live is not None:
        for name in ("holder_wait_p99_s", "violations_against_holders"):
            figures[name] = live.get(name)
        if live.get("lost_work_per_preemption_s") is not None:
            figures["lost_work_per_preemption_s"] = live["lost_work_per_preemption_s"]
        figures["live_grace_s"] = live.get("grace_s")
        figures["live_checkpoint_interval_s"] = live_interval()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
