"""Violation benchmark: from an offending process starting to the first handler firing.

Run: ``.venv/bin/python benchmarks/violations.py [--quick | --smoke]`` (``--smoke``: 1 host,
2 trials) (no root needed).

Local simulated hosts (4; ``--quick``: 2) with four GPUs each are monitored the way the Hive
does it: a ``Monitor`` (sampler, discovery, usage) sweeping every ``poll_interval`` seconds with
``Protection.on_sweep`` registered as a listener, a SQLite store, and one ladder step (the
``event`` handler at 0 s) whose publisher notes the time. Each trial waits a random fraction of
the interval (so processes start at every phase of the sweep), starts a real process on a GPU
that another user reserved, and measures the time until the handler fires; then it stops the
process and waits until the violation is closed. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.model import HostDecl, utcnow
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.protection.service import Protection, ProtectionSettings
from jupyter_gpuhive.sim.cluster import LocalSimHost, start_gpu_process
from jupyter_gpuhive.store import Store

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:6.1f}s] {message}", flush=True)


def decl(host: LocalSimHost) -> HostDecl:
    env = host.env()
    return HostDecl(host.name, transport="local", extra={"env": {k: env[k] for k in SIM_ENV}})


async def wait_until(predicate: Any, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
    return True


@dataclass
class Watched:
    """Simulated hosts monitored with Protection on a SQLite store, as the Hive wires them."""

    sims: list[LocalSimHost]
    store: Store
    monitor: Monitor
    protection: Protection
    executor: ThreadPoolExecutor

    async def close(self) -> None:
        await self.protection.stop()
        await self.monitor.stop()
        self.store.close()
        self.executor.shutdown()


async def watched(
    sims: list[LocalSimHost], workdir: Path, interval: float, settings: ProtectionSettings,
    publish: Callable[[dict[str, Any]], None], entry: Callable[[LocalSimHost], HostDecl] = decl,
) -> Watched:  # fmt: skip
    """`sims` monitored every `interval` s, Protection on each sweep; discovery done."""
    executor = ThreadPoolExecutor(4, thread_name_prefix="bench-db")

    async def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    decls = [entry(h) for h in sims]
    store = Store(f"sqlite:///{workdir / 'hive.sqlite'}").open()
    store.inventory.sync(decls)
    pool = HostPool(decls)
    monitor = Monitor(store, pool, run, interval=interval, **unwired(pool))
    protection = Protection(settings, store, pool, run, publish=publish)
    monitor.on_sweep(protection.on_sweep)
    await monitor.sampler.sweep()  # discovery
    return Watched(sims, store, monitor, protection, executor)


async def timed(
    rig: Watched, proc: Any, since: float, fired: dict[int, float], trial: str, where: str,
    latencies: list[float],
) -> None:  # fmt: skip
    """Add the seconds from `since` to a handler firing for `proc` to `latencies` (nothing
    when none fired); then end the process and wait its violation out."""
    interval = rig.monitor.sampler.interval
    if await wait_until(lambda: proc.pid in fired, timeout=interval + 10):
        latencies.append(fired[proc.pid] - since)
        log(f"{trial}: {latencies[-1]:.3f} s on {where}")
    else:
        log(f"{trial}: no handler fired")
    proc.kill()
    proc.wait()
    await wait_until(lambda: not rig.protection.ongoing(), timeout=interval * 3 + 10)


async def bench(interval: float, hosts: int, trials: int, workdir: Path) -> dict[str, Any]:
    sims = [LocalSimHost(f"vb{i}-{os.getpid()}", workdir / f"h{i}") for i in range(hosts)]
    fired: dict[int, float] = {}

    def publish(event: dict[str, Any]) -> None:
        for pid in event["pids"]:
            fired.setdefault(pid, time.time())

    # interval 0: every trial's new violation fires (by default a user is told once a minute).
    settings = ProtectionSettings(
        level=1, ladder=[{"after": 0, "handler": "event"}], handlers={"event": {"interval": 0}}
    )
    rig = await watched(sims, workdir, interval, settings, publish)
    store, monitor = rig.store, rig.monitor
    gpus = [g for h in sims for g in store.inventory.host(h.name).gpus]  # type: ignore[union-attr]
    start = utcnow() - timedelta(seconds=1)
    for gpu in gpus:
        store.reservations.create("bench-holder", "bench", "", start, start + timedelta(days=1),
                                  [gpu.id])  # fmt: skip
    monitor.start()
    await asyncio.sleep(interval)
    latencies: list[float] = []
    try:
        for trial in range(trials):
            await asyncio.sleep(random.uniform(0, interval))
            gpu = random.choice(gpus)
            started = time.time()
            proc = start_gpu_process(gpu.host, [gpu.index], command=("sleep", "600"))
            label = f"trial {trial + 1}/{trials}"
            await timed(rig, proc, started, fired, label, gpu.ref, latencies)
    finally:
        await rig.close()
    missed = trials - len(latencies)
    return {
        "poll_interval_s": interval,
        "hosts": hosts,
        "gpus": len(gpus),
        "trials": trials,
        "missed": missed,
        "detect_p50_s": round(statistics.median(latencies), 3) if latencies else None,
        "detect_p90_s": round(statistics.quantiles(latencies, n=10)[-1], 3)
        if len(latencies) > 1
        else None,
        "detect_min_s": round(min(latencies), 3) if latencies else None,
        "detect_max_s": round(max(latencies), 3) if latencies else None,
        "target_max_s": interval + 1,
        "met": bool(latencies) and not missed and max(latencies) <= interval + 1,
    }


def cli(doc: str, measure: Callable[..., Any], full_trials: int, what: str) -> None:
    """Parse the benchmark's options, run `measure(interval, hosts, trials, workdir)` on
    local simulated hosts in a temporary folder, print its result as the last line (JSON)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer hosts and trials")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    parser.add_argument("--interval", type=float, default=1.0, help="poll interval (s)")
    parser.add_argument("--trials", type=int, default=None)
    args = parser.parse_args()
    logging.getLogger("jupyter_gpuhive").setLevel(logging.ERROR)
    hosts = 1 if args.smoke else 2 if args.quick else 4
    trials = args.trials or (2 if args.smoke else 8 if args.quick else full_trials)
    log(f"{hosts} {what}, poll interval {args.interval} s, {trials} trials")
    with tempfile.TemporaryDirectory(prefix="gpuhive-bench-") as tmp:
        result = asyncio.run(measure(args.interval, hosts, trials, Path(tmp)))
    print(json.dumps(result), flush=True)


def main() -> None:
    cli(__doc__ or "", bench, 40, "local simulated hosts")


if __name__ == "__main__":
    main()
