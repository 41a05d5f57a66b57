"""Queue benchmark: one admission pass over 10,000 queued jobs, 1,000 GPUs, 50,000 reservations.

Run: `.venv/bin/python benchmarks/job_queue.py [--quick | --smoke]` (`--smoke`: 10 hosts,
200 queued jobs, 800 reservations, one repeat; that it runs).
The cluster: 125 hosts × 8 GPUs; 50,000 single-GPU reservations over the next 14 days (the
scheduler's horizon); 150 running jobs holding 300 GPUs (their processes in the sweep, by
process group); foreign processes on 50 more GPUs; 10,000 pending queued jobs, 70 % naming
1/2/4/8 GPUs of one host and 30 % asking for a count, walltimes from 30 min to 24 h.

Measured (median of the repeats):
- `build_inputs_ms`: candidates, reservation spans and GPU states from in-memory jobs,
  reservations and a sweep — what the Scheduler does after reading the store;
- `admission_pass_ms`: the pure pass (`admission.admit`: conservative backfill, slots for
  the first 32 waiting jobs, with the reservation spans), no access rules; the target is
  ≤ 500 ms. `admission_pass_rules_ms`: the same with weekly access rules for every owner;
- `estimates_ms`: start estimates (the same pass, slots for the first 256 waiting jobs);
- `least_served_ms`: the preemptions the Scheduler chooses after that pass
  (`attained.takeovers`), with every running job preemptible and past 1 GPU-hour (the most
  work it can have; `least_served_takeovers`: how many it chose);
- `sqlite_snapshot_ms`: `Scheduler.snapshot` reading the same world from a real SQLite store
  (jobs with tasks, 50,000 reservations, rules, inventory) and building the inputs.

Then the queue's order against the baselines, in the same run: the queue replay's synthetic
trace (`tests/support/queue_trace.py`, seed 21; 64 hosts × 8 GPUs and 3,000 jobs, 32 and
1,000 with --quick, 16 and 100 with --smoke) replayed in simulated time, with the same
whole-host placement, under the queue as the Scheduler runs it (`las`: the real pass, then
the preemptions the Scheduler chooses, `attained.takeovers`, for least attained service;
half the trace's sweeps preemptible, a 30 s grace, a checkpoint every 10 min, completion
includes the work lost and the time back in the queue: `tests/support/las_replay.py`), the
same pass without preemption (`backfill`: the site's least_attained_service off), strict
FIFO (`fifo`) and Slurm's EASY backfill (`easy`, `tests/support/easy_backfill.py`), at two
loads: `busy` (85 % of capacity offered, near saturation) and `light` (50 %). Per load
(`by_load`) and, at the top, the worst over both, for `las` (`policy`): `mean_wait_vs_easy`,
`mean_jct_vs_easy` (completion = end - submission), `largest_class_max_wait_vs_easy` (jobs
of 64-128 GPUs), `util_vs_easy` (useful work: work lost to preemption left out), the same
four `_vs_fifo`; `max_preemptions_per_job` (its bound, `preemption_bound`, is the site's
`max_preemptions`, 3) and `starved_jobs`: jobs that started after the slot they held, or
that a job submitted more than `wait_order_bound_h` after them passed by taking a slot, in
`las` and `backfill`. Per load also `without_preemption` (the eight ratios of `backfill`),
`preempted_jobs`, `lost_h`, each policy's `mean_wait_h`, `mean_jct_h` and `replay_cpu_s`
(see docs/explanation/queue-order.md).
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert

from jupyter_gpuhive.bookings.access import Rule, Window
from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.jobs.admission import admit
from jupyter_gpuhive.jobs.attained import Runner, takeovers
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.queue import (
    RuleCheck,
    Scheduler,
    Snapshot,
    bookings_of,
    candidates,
    gpu_states,
    reserved_spans,
)
from jupyter_gpuhive.model import Gpu, GpuDecl, HostDecl, Identity, Reservation
from jupyter_gpuhive.model.jobs import Job, Task, TaskState
from jupyter_gpuhive.monitor.sampler import Sweep
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import (
    job_tasks,
    jobs,
    reservation_gpus,
    reservation_stats,
    reservations,
)
from tests.support.queue_figures import against_baselines
from tests.support.queue_trace import make_trace

T = TypeVar("T")
HOSTS, PER_HOST = 125, 8
QUEUED, RESERVATIONS = 10_000, 50_000
RUNNING_JOBS, FOREIGN_GPUS = 150, 50
WALLTIMES_H = (0.5, 1, 2, 4, 8, 24)
SIZES = (1, 1, 1, 1, 2, 2, 4, 8)
OWNERS = [f"user{i}" for i in range(40)]
NOW = datetime.now(UTC).replace(microsecond=0)
DEFAULT_WALLTIME = timedelta(hours=1)
REPLAY_SEED = 21  # the queue replay's trace (tests/support/queue_trace.py)
LEAD = 1.5 * 5 + 10 + 3  # the Scheduler's preemption lead at a 5 s poll and 10 s grace


def timed(fn: Callable[[], T], repeats: int) -> tuple[T, float]:
    """The result of the last run and the median wall time in ms."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return result, round(statistics.median(times), 2)  # type: ignore[return-value]


class World:
    """The benchmark cluster as plain objects (what the store would hand back)."""

    def __init__(self, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.hosts = [f"node{h:03d}" for h in range(HOSTS)]
        self.gpus = [
            Gpu(h * PER_HOST + i + 1, host, i, f"GPU-{h:03d}-{i}")
            for h, host in enumerate(self.hosts)
            for i in range(PER_HOST)
        ]
        self.reservations = self._reservations(rng)
        self.running = self._running(rng)
        self.sweep = self._sweep(rng)
        self.queued = self._queued(rng)

    def _reservations(self, rng: random.Random) -> list[Reservation]:
        per_gpu = RESERVATIONS // len(self.gpus)
        out: list[Reservation] = []
        for gpu in self.gpus:
            cursor = NOW - timedelta(hours=rng.uniform(0, 6))
            for _ in range(per_gpu):
                cursor += timedelta(hours=rng.uniform(0, 9))
                end = cursor + timedelta(hours=rng.choice((1, 2, 3, 4)))
                owner = rng.choice(OWNERS)
                out.append(Reservation(len(out) + 1, owner, "r", "", cursor, end, (gpu,), NOW))
                cursor = end
        return out

    def _task(self, job_id: int, owner: str, host: str, gpus: list[Gpu], state: TaskState,
              pgid: int | None = None) -> Task:  # fmt: skip
        return Task(
            id=job_id, job_id=job_id, index=0, owner=owner, host=host, address=host,
            role="task", gpus=tuple(g.uuid for g in gpus), gpu_indices=tuple(g.index for g in gpus),
            command="python train.py", env={}, workdir=None, variables={},
            session=f"gpuhive-{job_id}-j-0", log_path="l", exit_path="e", state=state, pgid=pgid,
            started_at=NOW - timedelta(minutes=10) if state == TaskState.RUNNING else None,
        )  # fmt: skip

    def _running(self, rng: random.Random) -> list[Job]:
        out = []
        pairs = rng.sample(range(len(self.gpus) // 2), RUNNING_JOBS)  # 2 GPUs each
        for n, pair in enumerate(pairs):
            job_id = 1_000_000 + n
            owner = rng.choice(OWNERS)
            gpus = self.gpus[2 * pair : 2 * pair + 2]
            host = gpus[0].host
            task = self._task(job_id, owner, host, gpus, TaskState.RUNNING, 40_000 + n)
            out.append(Job(name="run", owner=owner, command="c", queued=True, id=job_id,
                           walltime=timedelta(hours=4), created_at=NOW, tasks=(task,)))  # fmt: skip
        return out

    def _sweep(self, rng: random.Random) -> Sweep:
        procs: dict[str, list[ProcessInfo]] = {}
        for job in self.running:
            task = job.tasks[0]
            for k, uuid in enumerate(task.gpus):
                info = ProcessInfo(30_000 + job.id % 10_000 * 8 + k, uuid, job.owner, "python",
                                   1000, task.pgid)  # fmt: skip
                procs.setdefault(task.host, []).append(info)
        held = {u for job in self.running for u in job.tasks[0].gpus}
        free = [g for g in self.gpus if g.uuid not in held]
        for n, gpu in enumerate(rng.sample(free, FOREIGN_GPUS)):
            info = ProcessInfo(90_000 + n, gpu.uuid, "eve", "python", 500, 90_000 + n)
            procs.setdefault(gpu.host, []).append(info)
        samples = {
            host: HostSample(host, NOW, processes=tuple(procs.get(host, ()))) for host in self.hosts
        }
        return Sweep(NOW, 5.0, samples)

    def _queued(self, rng: random.Random) -> list[Job]:
        out = []
        for n in range(QUEUED):
            job_id = n + 1
            owner = rng.choice(OWNERS)
            size = rng.choice(SIZES)
            walltime = timedelta(hours=rng.choice(WALLTIMES_H))
            created = NOW - timedelta(minutes=rng.uniform(0, 600))
            if rng.random() < 0.3:
                out.append(Job(name="c", owner=owner, command="c", queued=True, id=job_id,
                               options={"gpu_count": size}, walltime=walltime,
                               created_at=created))  # fmt: skip
                continue
            h = rng.randrange(HOSTS)
            first = rng.randrange(PER_HOST - size + 1)
            gpus = self.gpus[h * PER_HOST + first : h * PER_HOST + first + size]
            task = self._task(job_id, owner, self.hosts[h], gpus, TaskState.PENDING)
            out.append(Job(name="q", owner=owner, command="c", queued=True, id=job_id,
                           walltime=walltime, created_at=created, tasks=(task,)))  # fmt: skip
        return out

    @property
    def jobs(self) -> list[Job]:
        return [*self.running, *self.queued]


def weekly_rules() -> list[Rule]:
    """Everyone may use everything, in windows that chain: 00-12 daily, 12-24 daily."""
    days = frozenset(range(7))
    morning = Window(days, datetime.min.time(), datetime.min.time().replace(hour=12))
    afternoon = Window(days, datetime.min.time().replace(hour=12), None)
    return [Rule(1, "lab", users=frozenset({"*"}), windows=(morning, afternoon))]


def measure_memory(world: World, repeats: int) -> dict[str, Any]:
    at = NOW.timestamp()

    def build() -> tuple[Any, Any, Any]:
        spans = reserved_spans(bookings_of(world.reservations), world.jobs)
        states = gpu_states(world.gpus, spans, world.jobs, world.sweep, NOW)
        found = candidates(world.jobs, NOW, DEFAULT_WALLTIME, min_length=LEAD, attained=True)
        return spans, states, found

    (spans, states, found), build_ms = timed(build, repeats)
    horizon = (NOW + timedelta(days=14)).timestamp()
    result, pass_ms = timed(
        lambda: admit(found, states, at, reserved=spans, horizon=horizon), repeats
    )
    snap = Snapshot(NOW, world.jobs, {}, states, spans, {g.uuid: g for g in world.gpus},
                    weekly_rules(), {o: Identity(o) for o in OWNERS})  # fmt: skip
    ruled, rules_ms = timed(
        lambda: admit(found, states, at, access=RuleCheck(snap, UTC), reserved=spans,
                      horizon=horizon),
        repeats,
    )  # fmt: skip
    runners = [  # every running job preemptible and past its first level: the worst case
        Runner(job.id, job.tasks[0].host, job.tasks[0].gpus, 2 * 3600.0 * len(job.gpus), 0)
        for job in world.running
    ]
    pending = {c.job_id: c for c in found}
    ways, least_served_ms = timed(
        lambda: takeovers(result, pending, states, runners, at, 30.0, 3,
                          taken=[u for a in result.admitted for u in a.gpus]),
        repeats,
    )  # fmt: skip
    guesses, estimates_ms = timed(
        lambda: admit(found, states, at, reserved=spans, horizon=horizon, depth=256).starts(at),
        1,
    )
    return {
        "build_inputs_ms": build_ms,
        "admission_pass_ms": pass_ms,
        "admission_pass_rules_ms": rules_ms,
        "estimates_ms": estimates_ms,
        "least_served_ms": least_served_ms,
        "least_served_takeovers": len(ways),
        "admitted": len(result.admitted),
        "admitted_gpus": sum(len(a.gpus) for a in result.admitted),
        "admitted_with_rules": len(ruled.admitted),
        "free_gpus_now": sum(1 for s in states.values() if s.blocker is None),
        "estimated": sum(1 for v in guesses.values() if v is not None),
    }


def seed_sqlite(url: str, world: World) -> Store:
    """The same world in a real store (bulk inserts, as if it had been built over time)."""
    store = Store(url).open()
    decls = [
        HostDecl(host, host, gpus=tuple(GpuDecl(i, f"GPU-{h:03d}-{i}") for i in range(PER_HOST)))
        for h, host in enumerate(world.hosts)
    ]
    store.inventory.sync(decls)
    ids = {g.uuid: g.id for g in store.inventory.gpus()}
    res_rows = [
        {"id": r.id, "owner": r.owner, "title": r.title, "description": "", "start_at": r.start,
         "end_at": r.end, "created_at": NOW, "flagged": False}
        for r in world.reservations
    ]  # fmt: skip
    links = [
        {"reservation_id": r.id, "gpu_id": ids[r.gpus[0].uuid],
         "device_id": ids[r.gpus[0].uuid], "start_at": r.start, "end_at": r.end,
         "cancelled": False}  # a whole GPU: its own physical device
        for r in world.reservations
    ]  # fmt: skip
    job_rows, task_rows = [], []
    for job in world.jobs:
        job_rows.append(
            {"id": job.id, "name": job.name, "owner": job.owner, "description": "",
             "template": "plain", "command": job.command, "options": json.dumps(job.options),
             "variables": "{}", "sweep": "{}", "env": "{}", "queued": job.queued,
             "walltime_s": int(job.walltime.total_seconds()) if job.walltime else None,
             "max_retries": 0, "attempts": 0, "created_at": job.created_at,
             "updated_at": NOW}
        )  # fmt: skip
        for t in job.tasks:
            task_rows.append(
                {"job_id": job.id, "idx": 0, "host": t.host, "address": t.address,
                 "role": t.role, "gpus": json.dumps(list(t.gpus)),
                 "gpu_indices": json.dumps(list(t.gpu_indices)), "command": t.command,
                 "env": "{}", "variables": "{}", "session": t.session, "log_path": t.log_path,
                 "exit_path": t.exit_path, "state": str(t.state), "pgid": t.pgid,
                 "started_at": t.started_at}
            )  # fmt: skip

    def work(conn: Any) -> None:
        for table, rows in ((reservations, res_rows), (reservation_gpus, links),
                            (jobs, job_rows), (job_tasks, task_rows)):  # fmt: skip
            for i in range(0, len(rows), 5000):
                conn.execute(insert(table), rows[i : i + 5000])
        conn.execute(reservation_stats.update().values(longest_seconds=4 * 3600 + 1))

    store.db.write(work)
    store.rules.add(weekly_rules()[0], "admin")
    return store


def measure_sqlite(world: World, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        store = seed_sqlite(f"sqlite:///{Path(tmp) / 'queue.sqlite'}", world)
        seed_ms = (time.perf_counter() - start) * 1000
        try:
            launcher = Launcher(HostPool(()), store.jobs)  # never started
            scheduler = Scheduler(store, launcher, identity_of=Identity, zone=UTC)
            snap, snap_ms = timed(lambda: scheduler.snapshot(NOW, world.sweep), repeats)
            found = candidates(snap.jobs, NOW, DEFAULT_WALLTIME, min_length=LEAD, attained=True)
            check = RuleCheck(snap, UTC)
            horizon = (NOW + timedelta(days=14)).timestamp()
            result, pass_ms = timed(
                lambda: admit(found, snap.gpus, NOW.timestamp(), access=check,
                              reserved=snap.reserved, horizon=horizon),
                repeats,
            )  # fmt: skip
        finally:
            store.close()
    return {
        "sqlite_seed_ms": round(seed_ms),
        "sqlite_snapshot_ms": snap_ms,
        "sqlite_jobs_read": len(snap.jobs),
        "sqlite_reservations_read": sum(len(v) for v in snap.reserved.values()),
        "sqlite_admission_pass_ms": pass_ms,
        "sqlite_admitted": len(result.admitted),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, same sizes")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    args = parser.parse_args()
    repeats = 1 if args.smoke else 3 if args.quick else 7
    global HOSTS, QUEUED, RESERVATIONS, RUNNING_JOBS, FOREIGN_GPUS
    if args.smoke:
        HOSTS, QUEUED, RESERVATIONS, RUNNING_JOBS, FOREIGN_GPUS = 10, 200, 800, 10, 5
    world = World()
    figures = measure_memory(world, repeats)
    print(f"in memory: {json.dumps(figures)}", flush=True)
    stored = measure_sqlite(world, 1 if args.quick or args.smoke else 3)
    print(f"sqlite: {json.dumps(stored)}", flush=True)
    hosts, jobs = (16, 100) if args.smoke else (32, 1000) if args.quick else (64, 3000)
    print(f"replay: {hosts} hosts x {PER_HOST} GPUs, {jobs} jobs", flush=True)
    replayed = against_baselines(make_trace(jobs, REPLAY_SEED), hosts, REPLAY_SEED)
    final = {
        "queued_jobs": QUEUED,
        "gpus": len(world.gpus),
        "reservations": RESERVATIONS,
        "running_jobs": RUNNING_JOBS,
        **figures,
        **stored,
        **replayed,
        "target_ms": 500,
        "quick": args.quick,
    }
    print(json.dumps(final))


if __name__ == "__main__":
    main()
