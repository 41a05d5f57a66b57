"""Over-share benchmark: from a share holder's process growing past the share to the violation.

Run: ``.venv/bin/python benchmarks/shares_enforce.py [--quick | --smoke]`` (``--smoke``: 1
host, 2 trials) (no root needed). ``over_share_detected_s`` is the figure issue #44 asks for
(``benchmarks/shares.py`` reports it too, through ``over_share_detected``).

Local simulated hosts with four shareable GPUs each are monitored the way the Hive does it: a
``Monitor`` sweeping every ``poll_interval`` seconds with ``Protection.on_sweep`` registered, a
SQLite store, and one ladder step (the ``event`` handler at 0 s) whose publisher notes the
time. Every GPU holds two quarter shares: the holder's (this benchmark's UNIX user) and
another's. Each trial starts a real process of the holder within the share (half of it, as
the stand-in reports per process), waits a random fraction of the interval, and makes that
same process grow past the share (it replaces itself, same pid, with the memory the driver
then reports: 1.5 shares); the figure is the time from the growth to the handler firing.
Then the process stops and the violation closes. The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import random
import signal
import statistics
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.violations import cli, timed, wait_until, watched
from benchmarks.violations import decl as plain_decl
from jupyter_gpuhive.model import HostDecl, utcnow
from jupyter_gpuhive.model.shares import WHOLE
from jupyter_gpuhive.protection.service import ProtectionSettings
from jupyter_gpuhive.sim.cluster import LocalSimHost, start_gpu_process
from jupyter_gpuhive.sim.core import MEM_ENV

HOLDER = "share-holder"
QUARTER = WHOLE // 4
# Waits for SIGUSR1, then becomes `sleep` with more memory (same pid: the driver's figure for
# the process grows in place).
GROWS = (
    "import os, signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
    "open(sys.argv[3], 'w').close()\n"
    "signal.sigwait({signal.SIGUSR1})\n"
    "os.execve('/bin/sleep', ['sleep', '600'], {**os.environ, sys.argv[1]: sys.argv[2]})\n"
)


def decl(host: LocalSimHost) -> HostDecl:
    """A local simulated host whose GPUs bookings may share."""
    return replace(plain_decl(host), shareable=True)


async def over_share_detected(
    interval: float, hosts: int, trials: int, workdir: Path
) -> dict[str, Any]:
    """Trials of a share holder growing past the share: the seconds to the violation."""
    sims = [LocalSimHost(f"sh{i}-{os.getpid()}", workdir / f"h{i}") for i in range(hosts)]
    fired: dict[int, float] = {}

    def publish(event: dict[str, Any]) -> None:
        if event.get("kind") == "over-share":
            for pid in event["pids"]:
                fired.setdefault(pid, time.time())

    settings = ProtectionSettings(
        level=1, ladder=[{"after": 0, "handler": "event"}], handlers={"event": {"interval": 0}},
        user_map={HOLDER: getpass.getuser()},
    )  # fmt: skip
    rig = await watched(sims, workdir, interval, settings, publish, decl)
    store, monitor = rig.store, rig.monitor
    gpus = [g for h in sims for g in store.inventory.host(h.name).gpus]  # type: ignore[union-attr]
    start = utcnow() - timedelta(seconds=1)
    for gpu in gpus:
        for owner in (HOLDER, "share-neighbour"):
            store.reservations.create(owner, "bench", "", start, start + timedelta(days=1),
                                      [gpu.id], share=QUARTER)  # fmt: skip
    monitor.start()
    await asyncio.sleep(interval)
    latencies: list[float] = []
    try:
        for trial in range(trials):
            gpu = random.choice(gpus)
            quarter = (gpu.memory_mib or 0) // 4
            ready = workdir / f"ready-{trial}"  # it waits for the signal (before: it would end)
            command = ("python3", "-c", GROWS, MEM_ENV, str(quarter * 3 // 2), str(ready))
            proc = start_gpu_process(gpu.host, [gpu.index], command=command, mem_mib=quarter // 2)
            await wait_until(ready.exists, timeout=30)
            await asyncio.sleep(interval + random.uniform(0, interval))  # seen within the share
            grown = time.time()
            os.kill(proc.pid, signal.SIGUSR1)
            label = f"trial {trial + 1}/{trials}"
            await timed(rig, proc, grown, fired, label, gpu.ref, latencies)
    finally:
        await rig.close()
    missed = trials - len(latencies)
    worst = max(latencies) if latencies else None
    return {
        "poll_interval_s": interval,
        "shareable_gpus": len(gpus),
        "over_share_trials": trials,
        "over_share_missed": missed,
        "over_share_detected_s": round(worst, 3) if worst is not None else None,
        "over_share_detected_p50_s": round(statistics.median(latencies), 3) if latencies else None,
        "over_share_target_s": interval + 1,
        "over_share_met": worst is not None and not missed and worst <= interval + 1,
    }


def main() -> None:
    # the violations benchmark's options: "--smoke" (make bench-smoke's size), "--quick"
    cli(__doc__ or "", over_share_detected, 30, "shareable simulated hosts")


if __name__ == "__main__":
    main()
