"""Real preemptions on a simulated host, for `benchmarks/preemption.py` (a fixture: `measure`).

Run alone: `.venv/bin/python benchmarks/preemption_live.py [--smoke]` (root: the job and the
holder run as real test users). The last line printed is one JSON object.

The real Scheduler, launcher, probe and watch, over one simulated GPU host (`local`
transport) and a SQLite store. A preemptible job, a real Python process in screen as the test
user, sums 0..STEPS-1 one step (STEP_S) at a time, saves every SAVE_EVERY steps and when it
gets its signal, and resumes from its save. It runs on a GPU of a reservation whose holder
(another real user) then starts a real process on that GPU, N times over:

- `holder_wait_p99_s`: from the holder's process start to the job's last process gone (the
  job's pid polled every 10 ms), the 99th percentile over the N reclaims;
- `violations_against_holders`: violations the real detection raises against the holder in
  a sweep taken while the holder's and the job's processes share the GPU (each reclaim);
- `lost_work_per_preemption_s`: steps the job did again after a resume (the last step it
  logged before it stopped minus the step it resumed from), times STEP_S, mean per reclaim.
Each resume's sum is checked against the right one for its step (a wrong resume fails the run).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.jobs.preemption import PreemptionSettings
from jupyter_gpuhive.jobs.queue import Scheduler
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity
from jupyter_gpuhive.model.jobs import Job
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.protection.violations import DetectionPolicy, detect
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import ensure_user, start_gpu_process
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs

OWNER = "hivejob1"  # the job's owner
HOLDER = "hivefor1"  # the reservation's holder
STEP_S = 0.05
SAVE_EVERY = 20
GRACE_S = 5
# How long a step may wait for the scheduler (admission, a resume): generous, since a
# loaded machine (bench-smoke next to other work) once took more than 30 s.
WAIT_S = 120

WORKER = """\
import json, os, signal, sys, time
path = os.path.join(os.environ["GPUHIVE_CHECKPOINT_DIR"], "state.json")
state = {"step": 0, "total": 0}
if os.path.exists(path):
    with open(path) as f:
        state = json.load(f)
    print(f"resumed from step {state['step']} total {state['total']}", flush=True)
print(f"pid {os.getpid()}", flush=True)
told = []
signal.signal(getattr(signal, os.environ["GPUHIVE_PREEMPT_SIGNAL"]), lambda *_: told.append(1))
step_s, every, steps = (float(os.environ["STEP_S"]), int(os.environ["SAVE_EVERY"]),
                        int(os.environ["STEPS"]))
def save():
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
while state["step"] < steps:
    if told:
        save()
        print(f"saved at step {state['step']}", flush=True)
        sys.exit(0)
    time.sleep(step_s)
    state["total"] += state["step"]
    state["step"] += 1
    print(f"step {state['step']}", flush=True)
    if state["step"] % every == 0:
        save()
print(f"result {state['total']}", flush=True)
"""


def _quit_sessions(user: str) -> None:
    out = subprocess.run(["runuser", "-u", user, "--", "screen", "-ls"], capture_output=True,
                         text=True).stdout  # fmt: skip
    for line in out.splitlines():
        if line.startswith("\t") and ".gpuhive-" in line:
            subprocess.run(["runuser", "-u", user, "--", "screen", "-S", line.split()[0],
                            "-X", "quit"])  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for the GPU.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


async def poll(check: Callable[[], Awaitable[Any]], every: float = 0.05) -> Any:
    """Call `check` until it returns something true; that (the caller sets the timeout)."""
    found = await check()
    while not found:
        await asyncio.sleep(every)
        found = await check()
    return found


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


async def _run(count: int, folder: Path) -> dict[str, Any]:
    name = f"pl-{uuid.uuid4().hex[:6]}"
    sim = LocalSimHost(name, folder / name, preset("a100x4", name))
    env = sim.env()
    keep = {k: env[k] for k in ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")}
    gpus = tuple(GpuDecl(g.index, g.uuid) for g in sim.config.gpus)
    decl = HostDecl("pl", "127.0.0.1", transport="local", gpus=gpus, extra={"env": keep})
    store = Store(f"sqlite:///{folder / 'hive.sqlite'}").open()
    store.inventory.sync([decl])
    log_dir = f"~/.gpuhive/plive-{uuid.uuid4().hex[:8]}"
    store.jobs = Jobs(store.db, log_dir=log_dir)
    pool = HostPool([decl], SshSettings(connect_timeout=2, command_timeout=20))
    launcher = Launcher(pool, store.jobs, grace=2.0)
    sampler = Sampler(pool, interval=1.0, timeout=10)
    settings = PreemptionSettings(grace_s=GRACE_S, max_preemptions=count + 1,
                                  watch_interval=0.2)  # fmt: skip
    scheduler = Scheduler(store, launcher, identity_of=Identity, zone=UTC, interval=1.0,
                          sync_tasks=True, preemption=settings)  # fmt: skip
    uuid0 = sim.config.gpus[0].uuid
    gpu = store.inventory.gpu("pl:0")
    assert gpu is not None
    now = datetime.now(UTC)
    rid = store.reservations.create(HOLDER, "lent", "", now - timedelta(minutes=1),
                                    now + timedelta(hours=2), [gpu.id]).id  # fmt: skip
    steps = 100000
    job = Job(name=f"pl{uuid.uuid4().hex[:6]}", owner=OWNER, command="python3 -c {w}",
              variables={"w": WORKER}, queued=True, walltime=timedelta(hours=1),
              preemptible=True, preempt_signal="SIGUSR1",
              env={"STEP_S": str(STEP_S), "SAVE_EVERY": str(SAVE_EVERY), "STEPS": str(steps)})  # fmt: skip
    slot = [("pl", "127.0.0.1", [GpuSlot("pl", "127.0.0.1", 0, uuid0)])]
    made = store.jobs.create(job, render_tasks(job, slot))
    waits: list[float] = []
    lost: list[float] = []
    against = 0
    seen = 0  # the log's bytes read so far: each run appends to it

    async def log_from(offset: int) -> str:
        return (await launcher.log(store.jobs.get(made.id).tasks[0], offset)).text

    async def log_having(pattern: str) -> str | None:
        text = await log_from(seen)
        return text if re.search(pattern, text, re.M) else None

    async def admitted() -> bool:
        return made.id in (await scheduler.tick(await sampler.sweep())).admitted

    async def gone(pid: int) -> bool:
        return not _alive(pid)

    try:
        for _ in range(count):
            async with asyncio.timeout(WAIT_S):
                await poll(admitted)
                text = await poll(lambda: log_having(r"^step \d+$"))
            pid = int(re.findall(r"^pid (\d+)$", text, re.M)[-1])
            began = time.monotonic()
            holder = start_gpu_process(name, [uuid0], user=HOLDER)
            try:
                sweep = await sampler.sweep()
                lent = await scheduler.lent_processes(sweep)
                res = store.reservations.get(rid)
                found = detect(sweep.samples.values(), [res], sweep.at,
                               DetectionPolicy(level=1), lent=lent)  # fmt: skip
                against += sum(1 for v in found if v.offender == HOLDER)
                async with asyncio.timeout(GRACE_S + 20):
                    await poll(functools.partial(gone, pid), every=0.01)
                waits.append(time.monotonic() - began)
                await scheduler.settle()
                text = await log_from(seen)
                done = max(int(s) for s in re.findall(r"^step (\d+)$", text, re.M))
                seen += len(text.encode())
            finally:
                holder.kill()
                holder.wait()
            async with asyncio.timeout(WAIT_S):
                await poll(admitted)
                text = await poll(lambda: log_having("^resumed from step"))
            resumed, total = (int(n) for n in re.findall(r"^resumed from step (\d+) total (\d+)$",
                                                         text, re.M)[-1])  # fmt: skip
            if total != resumed * (resumed - 1) // 2:
                raise RuntimeError(f"resumed at step {resumed} with the sum {total}: wrong")
            lost.append(max(0, done - resumed) * STEP_S)
            await launcher.stop(made.id, grace=0.5)  # the next round starts it afresh
            store.preemption.requeue(made.id, datetime.now(UTC), "next round")
            seen += len((await log_from(seen)).encode())
        history = store.jobs.get(made.id).history
        if sum(1 for e in history if e.kind == "preempted") != count:
            raise RuntimeError(f"expected {count} preemptions, the history has {history}")
    finally:
        await scheduler.settle()
        await launcher.stop(made.id, grace=0)
        _quit_sessions(OWNER)
        await pool.close()
        store.close()
        shutil.rmtree(Path(f"/home/{OWNER}") / log_dir[2:], ignore_errors=True)
    return {
        "holder_wait_p99_s": round(p99(waits), 3),
        "violations_against_holders": against,
        "lost_work_per_preemption_s": round(sum(lost) / len(lost), 3),
        "preemptions": count,
        "grace_s": GRACE_S,
        "holder_wait_max_s": round(max(waits), 3),
    }


def measure(smoke: bool) -> dict[str, Any]:
    """Run N real preemptions (3 with `smoke`, else 20) and return the measured figures."""
    ensure_user(OWNER)
    ensure_user(HOLDER)
    folder = Path(tempfile.mkdtemp(prefix="gpuhive-plive-"))
    folder.chmod(0o755)
    try:
        return asyncio.run(_run(3 if smoke else 20, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    figures = measure(args.smoke)
    print(json.dumps(figures), file=sys.stdout)


if __name__ == "__main__":
    main()
