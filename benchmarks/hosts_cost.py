"""GET hosts cost against the number of bookings (issue #33 item 2), in-process.

Run: ``.venv/bin/python benchmarks/hosts_cost.py [--smoke]`` (``--smoke``: 600 bookings, few
calls). A store (SQLite, and PostgreSQL when its binaries are installed) with 20 hosts × 8
GPUs, a ``Monitor`` over them (no sweeps: the live part is the same whatever the bookings),
and 0 or N upcoming reservations (default 10,000, spread over the next 30 days, some running
now). Each figure is the process CPU per ``Monitor.report()`` (the ``GET hosts`` answer):

- ``read``: every call reads the holders (the cache emptied before each), the cost of the
  first request after a sweep, a booking or a poll interval;
- ``cached``: calls as they come between two of those (the cache shared by all requests);
- ``before``: the pre-0018 read of every booking of the next 30 days, for comparison.

``*_ratio_10k``: with N bookings over with none (target <= 1.5). With none, no GPU has a
holder to show; with 300 bookings the answer is already the one of N (80 GPUs held now, every
GPU with a next holder): ``*_ratio_same_answer`` is N over 300, what the bookings themselves
cost.

``publish``: what the leader's publication of one sweep of these hosts costs (8 GPUs with 2
processes each per host): ``body_kb``, ``encode_ms`` (CPU, in the sampler process),
``write_ms`` (wall, one transaction that also drops the oldest kept sweep), ``decode_ms`` (CPU,
on each follower). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.hosts.status import HostStatus
from jupyter_gpuhive.hosts.vendors.nvidia_smi import GpuMetrics
from jupyter_gpuhive.model import GpuDecl, HostDecl, utcnow
from jupyter_gpuhive.monitor.holders import HORIZON
from jupyter_gpuhive.monitor.published import decode, encode
from jupyter_gpuhive.monitor.sampler import Sweep
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.store import Store

HOSTS, GPUS = 20, 8


def decls() -> list[HostDecl]:
    return [
        HostDecl(f"node{h:02d}", transport="local",
                 gpus=tuple(GpuDecl(i, f"GPU-{h:02d}-{i}", "A100", 81920) for i in range(GPUS)))
        for h in range(HOSTS)
    ]  # fmt: skip


def book(store: Store, count: int, seed: int = 7) -> int:
    """`count` live bookings: one running now on half the GPUs, the rest in the next 30 days."""
    rng = random.Random(seed)
    units = store.inventory.units()
    now = utcnow()
    made = 0
    for unit in units[: len(units) // 2]:
        store.reservations.create("run", "now", "", now - timedelta(hours=1),
                                  now + timedelta(hours=2), [unit.id])  # fmt: skip
        made += 1
    per_unit = max(1, (count - made) // len(units))
    slot = (HORIZON - timedelta(hours=3)) / per_unit
    for unit in units:
        for k in range(per_unit):
            start = now + timedelta(hours=3) + slot * k + timedelta(minutes=rng.randint(0, 30))
            try:
                store.reservations.create(f"u{rng.randint(0, 199)}", "job", "", start,
                                          start + slot * 0.6, [unit.id])  # fmt: skip
                made += 1
            except Conflict:
                pass
    return made


async def cpu_per_call(call: Callable[[], Any], calls: int) -> float:
    """Process CPU seconds per awaited call (threads included)."""
    await call()  # warm
    began = time.process_time()
    for _ in range(calls):
        await call()
    return (time.process_time() - began) / calls


async def measure(store: Store, calls: int) -> dict[str, float]:
    executor = ThreadPoolExecutor(4)

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args))

    pool = HostPool(decls())
    monitor = Monitor(store, pool, run, interval=5.0, **unwired(pool))

    async def read() -> Any:
        monitor.holders._key = None  # as after a sweep, a booking or a poll interval
        return await monitor.report()

    async def before() -> Any:
        now = utcnow()
        return await run(store.reservations.window, now, now + HORIZON)

    try:
        return {
            "read_ms": 1000 * await cpu_per_call(read, calls),
            "cached_ms": 1000 * await cpu_per_call(monitor.report, calls * 5),
            "before_ms": 1000 * await cpu_per_call(before, max(3, calls // 5)),
        }
    finally:
        executor.shutdown()


def sweep() -> tuple[Sweep, dict[str, HostStatus]]:
    """A sweep of every host as the sampler makes it: 8 busy GPUs, 2 processes on each."""
    at = utcnow()
    samples = {}
    for h in decls():
        gpus = tuple(
            GpuMetrics(g.index, g.uuid, g.model, 93, 40, 61234, 81920, 67, 312.5, None, 400.0,
                       f"00000000:{g.index:02X}:00.0", True, False)
            for g in h.gpus
        )  # fmt: skip
        procs = tuple(
            ProcessInfo(4000 + 10 * g.index + k, g.uuid, f"user{k}",
                        "python train.py --config configs/run.yaml", 30000, 4000)
            for g in h.gpus for k in range(2)
        )  # fmt: skip
        samples[h.name] = HostSample(h.name, at, gpus, procs, cpu_jiffies=(123456, 999999),
                                     cpu_count=64, mem_total_mib=515000,
                                     mem_available_mib=400000)  # fmt: skip
    statuses = {h.name: HostStatus(h.name, "up", None, at, at) for h in decls()}
    return Sweep(at, 5.0, samples, latency={h.name: 0.05 for h in decls()}), statuses


def publishing(new_url: Callable[[], str], times: int) -> dict[str, float]:
    """Costs of publishing one sweep (see the module's docstring)."""
    made, statuses = sweep()
    began = time.process_time()
    for _ in range(times):
        body = encode(made, statuses)
    encode_ms = 1000 * (time.process_time() - began) / times
    began = time.process_time()
    for _ in range(times):
        decode(body)
    decode_ms = 1000 * (time.process_time() - began) / times
    store = Store(new_url()).open()
    store.live_sweeps.publish(made.at, body, 720)
    began = time.perf_counter()
    for _ in range(times):
        store.live_sweeps.publish(made.at, body, 720)
    write_ms = 1000 * (time.perf_counter() - began) / times
    store.close()
    return {
        "body_kb": round(len(body) / 1024, 1),
        "encode_ms": round(encode_ms, 2),
        "write_ms": round(write_ms, 2),
        "decode_ms": round(decode_ms, 2),
    }


@contextlib.contextmanager
def databases(postgres: bool) -> Iterator[dict[str, Callable[[], str]]]:
    with tempfile.TemporaryDirectory() as folder:
        count = iter(range(100))
        urls: dict[str, Callable[[], str]] = {
            "sqlite": lambda: f"sqlite:///{folder}/hive{next(count)}.sqlite"
        }
        if not postgres:
            yield urls
            return
        from tests.support.postgres import running_postgres

        with running_postgres() as cluster:
            urls["postgresql"] = cluster.new_database
            yield urls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="600 bookings, few calls")
    parser.add_argument("--bookings", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    bookings, calls = (600, 5) if args.smoke else (args.bookings, args.calls)
    try:
        from tests.support.postgres import _bin

        _bin("initdb")
        postgres = not args.no_postgres
    except RuntimeError:
        postgres = False
    result: dict[str, Any] = {"hosts": HOSTS, "gpus": HOSTS * GPUS}
    with databases(postgres) as urls:
        for name, new_url in urls.items():
            figures = {}
            for label, count in (("0", 0), ("few", 300), ("n", bookings)):
                store = Store(new_url()).open()
                store.inventory.sync(decls())
                made = book(store, count) if count else 0
                figures[label] = asyncio.run(measure(store, calls))
                figures[label]["bookings"] = made
                store.close()
                print(name, label, json.dumps(figures[label]), flush=True)
            zero, few, many = figures["0"], figures["few"], figures["n"]
            result[name] = {
                "bookings": many["bookings"],
                **{f"{k}_0": round(v, 3) for k, v in zero.items() if k != "bookings"},
                **{f"{k}_n": round(v, 3) for k, v in many.items() if k != "bookings"},
                "read_ratio_10k": round(many["read_ms"] / zero["read_ms"], 2),
                "cached_ratio_10k": round(many["cached_ms"] / zero["cached_ms"], 2),
                "before_ratio_10k": round(many["before_ms"] / max(zero["before_ms"], 1e-3), 2),
                "read_ratio_same_answer": round(many["read_ms"] / few["read_ms"], 2),
                "cached_ratio_same_answer": round(many["cached_ms"] / few["cached_ms"], 2),
                "publish": publishing(new_url, 10 if args.smoke else 100),
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
