"""Jobs on a real Slurm cluster (issue #47, item 3): what gpuhive's Slurm task runner costs
over Slurm's own clients, and whether its jobs run end to end.

Run: ``.venv/bin/python benchmarks/slurm.py [--smoke]`` (as root, with Debian's slurmctld,
slurmd, slurm-client and munge: `make sysdeps`). It starts the test suite's own cluster
(tests/support/slurm.py: one slurmctld, two slurmd with four fake GPUs each, in a temporary
folder), holds node n1 for an account as gpuhive's bookings do, then in the same run:

- submits `--smoke` 3 (else 20) tasks through gpuhive's Slurm runner (the start script as the
  owner: log folder, env file, the `squeue` check for a run of that name, `sbatch` in the
  booking's reservation) and as many plain `sbatch --wrap` of the same account, in turn;
- reads their states through the runner's `sync` (one `squeue` of the owner plus the exit
  files) and through a plain `squeue` of the owner, in turn;
- checks end to end: every task ran as the owner, in the reservation, with its GPUs pinned by
  Slurm, wrote its log and exit status, and was seen to succeed; a long task is stopped.

The last line printed is one JSON object: ``submit_p50_s``, ``submit_p99_s``,
``baseline_submit_p50_s``, ``submit_overhead_ratio`` (runner p50 over plain sbatch p50),
``status_poll_ms``, ``baseline_status_poll_ms``, ``status_overhead_ratio``, ``checks_passed``
of ``checks``. Where no Slurm cluster can run (not root, Slurm not installed) it prints why and
``{"skipped": "...", "checks_passed": 0, "checks": 0}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ACCOUNT = "gh-bench"
GPUS_PER_TASK = 1


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def home() -> Path:
    return Path(f"~{ACCOUNT}").expanduser() / ".gpuhive-bench"


def read_logs(names: list[str]) -> list[str]:
    return [(home() / f"{n}.log").read_text() if (home() / f"{n}.log").exists() else ""
            for n in names]  # fmt: skip


def queued_names(cluster: Any) -> list[str]:
    """The names of the account's jobs that Slurm still queues or runs."""
    listed = subprocess.run([f"{cluster.bin}/squeue", "-h", "-u", ACCOUNT, "-t",
                             "pending,running", "-o", "%j"], env=cluster.env,
                            capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
    return listed.stdout.split()


def skipped(reason: str) -> dict[str, Any]:
    print(f"slurm: skipped: {reason}")
    return {"skipped": reason, "checks_passed": 0, "checks": 0}


async def measure(cluster: Any, count: int) -> dict[str, Any]:
    from jupyter_gpuhive.hosts.backends.slurm import SlurmBackend, SlurmReservations, settings_of
    from jupyter_gpuhive.hosts.runners import Stopping, TaskStart, Watched
    from jupyter_gpuhive.hosts.ssh import SshSettings
    from jupyter_gpuhive.jobs import commands
    from jupyter_gpuhive.model import HostDecl, utcnow
    from jupyter_gpuhive.model.engines import Held
    from jupyter_gpuhive.model.jobs import GpuSlot, TaskSpec

    decl = HostDecl("n1", transport="slurm",
                    extra={"slurm": {"node": "n1", "conf": str(cluster.conf),
                                     "bin": cluster.bin}})  # fmt: skip
    backend = SlurmBackend(SshSettings(), "root")
    runner = backend.runner(decl)
    _node, where = settings_of(decl)
    now = utcnow()
    hold = Held("gpuhive-1", now, now + timedelta(hours=1), (("n1", 4),), (ACCOUNT,))
    await SlurmReservations(where).hold(hold, now)

    async def shell(script: str, command: str, timeout: float | None) -> Any:
        return await backend.task_run(decl, command, ACCOUNT, timeout or 60, script)

    def launch(name: str, command: str) -> TaskStart:
        base = f"./.gpuhive-bench/{name}"
        spec = TaskSpec("n1", "n1", (GpuSlot("n1", "n1", 0, "GPU-x"),), command,
                        {"CUDA_VISIBLE_DEVICES": "GPU-x"}, {})  # fmt: skip
        body = commands.task_script(spec, f"{base}.log", f"{base}.exit", f"{base}.env")
        return TaskStart(name, body, "./.gpuhive-bench", f"{base}.log", f"{base}.exit",
                         f"{base}.env", commands.env_file(spec), "n1", ACCOUNT,
                         GPUS_PER_TASK, hold.name, hold.end)  # fmt: skip

    def plain(*words: str) -> float:
        started = time.perf_counter()
        subprocess.run(["runuser", "-u", ACCOUNT, "--", *words], env=cluster.env, check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        return time.perf_counter() - started

    command = 'echo "ran as $(id -un) in $SLURM_JOB_RESERVATION gpus=$CUDA_VISIBLE_DEVICES"'
    ours, theirs, names = [], [], []
    for n in range(count):
        name = f"gpuhive-bench-{n}"
        started = time.perf_counter()
        await runner.start(shell, launch(name, command))
        ours.append(time.perf_counter() - started)
        names.append(name)
        theirs.append(plain(f"{cluster.bin}/sbatch", "--parsable", f"--reservation={hold.name}",
                            "--nodelist=n1", f"--gres=gpu:{GPUS_PER_TASK}", "--time=5",
                            "--output=/dev/null", "--wrap=true"))  # fmt: skip
    watched = [Watched(name, f"./.gpuhive-bench/{name}.exit") for name in names]
    polls, plain_polls = [], []
    for _ in range(max(3, count)):
        started = time.perf_counter()
        census = await runner.sync(shell, watched)
        polls.append(time.perf_counter() - started)
        plain_polls.append(plain(f"{cluster.bin}/squeue", "-h", "-u", ACCOUNT))
    # end to end: every task ends with exit status 0, as the owner, in the reservation
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        census = await runner.sync(shell, watched)
        if len(census.exits) == len(names):
            break
        await asyncio.sleep(0.5)
    checks: dict[str, bool] = {}
    checks["every task ended with status 0"] = all(census.exits.get(n) == "0" for n in names)
    logs = await asyncio.to_thread(read_logs, names)
    wanted = re.compile(rf"ran as {ACCOUNT} in {hold.name} gpus=\d\n")
    checks["every log says owner, reservation, Slurm's GPU"] = all(
        wanted.fullmatch(t) for t in logs
    )
    long = launch("gpuhive-bench-long", "sleep 300")
    started_long = await runner.start(shell, long)
    checks["a job id as handle"] = isinstance(started_long.handle, int)
    halted = await runner.stop(shell, [Watched(long.name, long.exit_path)],
                               Stopping(grace=2, patience=2))  # fmt: skip
    listed = await asyncio.to_thread(queued_names, cluster)
    checks["a stopped task leaves Slurm's queue"] = long.name not in listed
    checks["a stopped task writes its exit status"] = long.name in halted.exits
    for what, ok in checks.items():
        print(f"slurm: {'ok' if ok else 'FAILED'}: {what}")
    ours_p50, theirs_p50 = statistics.median(ours), statistics.median(theirs)
    poll, plain_poll = statistics.median(polls), statistics.median(plain_polls)
    return {
        "tasks": count,
        "submit_p50_s": round(ours_p50, 4),
        "submit_p99_s": round(percentile(ours, 0.99), 4),
        "baseline_submit_p50_s": round(theirs_p50, 4),
        "submit_overhead_ratio": round(ours_p50 / theirs_p50, 3),
        "status_poll_ms": round(poll * 1000, 1),
        "baseline_status_poll_ms": round(plain_poll * 1000, 1),
        "status_overhead_ratio": round(poll / plain_poll, 3),
        "checks_passed": sum(checks.values()),
        "checks": len(checks),
    }


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="3 tasks instead of 20")
    args = parser.parse_args()
    from jupyter_gpuhive.sim.users import ensure_user
    from tests.support.slurm import running_slurm, unavailable_reason

    reason = unavailable_reason()
    if reason:
        return skipped(reason)
    ensure_user(ACCOUNT)
    shutil.rmtree(home(), ignore_errors=True)  # logs are appended to: start with none
    with running_slurm() as cluster:
        return asyncio.run(measure(cluster, 3 if args.smoke else 20))


if __name__ == "__main__":
    print(json.dumps(main()))
