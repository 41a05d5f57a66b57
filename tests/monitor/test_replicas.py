"""Live state on every replica: the leader publishes each sweep, a follower serves the same.

Two Monitors on two Stores of one database (as two service replicas have), over real local
simulated hosts (one with MIG slices) with a real GPU process: the leader sweeps in its child
process and publishes; the follower serves the same hosts, processes, timestamps, host states
and metric series; when it leads, it sweeps on from the series it took; a replica started
after all that reads the same series from the kept sweeps.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest

from jupyter_gpuhive.monitor.published import decode, encode
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.store import Store
from tests.hosts.helpers import local_decl
from tests.support.waiting import until


@pytest.fixture
def run() -> Iterator[Callable[..., Any]]:
    executor = ThreadPoolExecutor(4, thread_name_prefix="test-db")

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args))

    yield call
    executor.shutdown(wait=True)


async def test_a_published_sweep_reads_back_the_same(make_local_host, make_pool, gpu_processes):
    hosts = [make_local_host("a100x4"), make_local_host("mig")]
    gpu_processes.append(hosts[0].start_process([1], mem_mib=1024, util=70))
    pool = make_pool([local_decl(h) for h in hosts])
    sampler = Sampler(pool, interval=5, timeout=10)
    sweep = await sampler.sweep()
    assert sweep.samples[hosts[0].name].processes  # something to carry
    assert any(sweep.samples[hosts[1].name].slices.values())  # and MIG slices
    statuses = pool.statuses()
    again, states = decode(encode(sweep, statuses))
    assert again == sweep
    assert states == statuses
    assert isinstance(again.samples[hosts[0].name].taken_at, datetime)


async def test_a_follower_serves_the_leaders_live_state_and_keeps_its_series(
    db_url, make_local_host, make_pool, gpu_processes, run
):
    hosts = [make_local_host("a100x4"), make_local_host("mig")]
    decls = [local_decl(h) for h in hosts]
    proc = hosts[0].start_process([2], mem_mib=2048, util=55)
    gpu_processes.append(proc)
    stores = [Store(db_url).open(), Store(db_url).open()]
    monitors = []
    for store in stores:
        store.inventory.sync(decls)
        pool = make_pool(decls)
        monitor = Monitor(store, pool, run, interval=0.5, **unwired(pool))
        monitor.sampler.timeout = 5.0  # the stand-in is slow on a busy 2-core box
        monitors.append(monitor)
    leader, follower = monitors
    try:
        await follower.follow()
        await leader.follow()
        await leader.lead()

        recorded = 0  # the sweep after which the leader had recorded discovery and topology

        async def same() -> Any:
            """Both answers, taken with no sweep in between (else None: try again)."""
            nonlocal recorded
            seen = leader.publication.seen
            if not seen or follower.publication.seen != seen:
                return None
            theirs = await leader.report(), leader.metrics(None, None, None)
            if not recorded and all(h["topology"] for h in theirs[0]["hosts"]):
                recorded = seen
            if not recorded or seen <= recorded:
                return None  # what the leader records after a sweep shows with the next one
            ours = await follower.report(), follower.metrics(None, None, None)
            if leader.publication.seen != seen or follower.publication.seen != seen:
                return None
            if not any(p["pid"] == proc.pid for _, p in _processes(theirs[0])):
                return None  # the leader has not seen the process yet
            return theirs, ours, (leader.host_states(), follower.host_states())

        theirs, ours, states = await until(same, timeout=60, interval=0.05)
        assert ours == theirs  # hosts, GPUs, slices, processes, timestamps, series
        assert states[0] == states[1] == {h.name: "up" for h in hosts}
        mine = [gpu for gpu, p in _processes(ours[0]) if p["pid"] == proc.pid]
        assert mine == [f"{hosts[0].name}:2"]
        assert all(h["updated_at"] for h in ours[0]["hosts"])
        slices = [s for h in ours[0]["hosts"] for g in h["gpus"] for s in g["slices"]]
        assert slices  # discovered by the leader: the follower re-read the inventory
        before = _series(ours[1])
        assert before and all(len(points) >= 1 for points in before.values())

        # The leader goes away; the follower leads: its series goes on from the leader's.
        await leader.halt()
        await follower.lead()
        await until(
            lambda: all(
                len(points) > len(before[key]) for key, points in _series(
                    follower.metrics(None, None, None)).items()
            ),
            timeout=60,
        )  # fmt: skip
        after = _series(follower.metrics(None, None, None))
        for key, points in before.items():
            assert after[key][: len(points)] == points, key  # nothing lost, nothing rewritten

        # A replica started now (or a personal server restarted) reads the kept sweeps first.
        states = follower.host_states()
        await follower.halt()
        stores.append(Store(db_url).open())
        pool = make_pool(decls)
        later = Monitor(stores[-1], pool, run, interval=0.5, **unwired(pool))
        monitors.append(later)
        await later.follow()
        await until(lambda: later.publication.seen == follower.publication.seen, timeout=30)
        assert later.metrics(None, None, None) == follower.metrics(None, None, None)
        assert later.host_states() == states
    finally:
        for monitor in monitors:
            await monitor.halt()
        for store in stores:
            store.close()


def _processes(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(GPU ref, process) of every process a GET hosts answer lists."""
    return [(g["id"], p) for h in report["hosts"] for g in h["gpus"] for p in g["processes"]]


def _series(metrics: dict[str, Any]) -> dict[str, list[Any]]:
    out = {f"host {k}": v["points"] for k, v in metrics["hosts"].items()}
    out.update({f"gpu {k}": v["points"] for k, v in metrics["gpus"].items() if v["points"]})
    return out
