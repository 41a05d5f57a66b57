"""The sampler: live state, metric series, listeners and its supervised loop, on real hosts."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta

import pytest

from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.monitor.metrics import GPU_FIELDS, HOST_FIELDS
from jupyter_gpuhive.monitor.sampler import Sampler, Sweep
from tests.hosts.helpers import G1, MIG, kill_sim_processes, local_decl, sim_processes
from tests.support.waiting import until


async def test_sweep_fills_live_state_and_metrics(hive_cluster, make_pool) -> None:
    pool = make_pool(hive_cluster, names=[G1, MIG])
    sampler = Sampler(pool, interval=5, history=3)
    assert sampler.live[G1].sample is None

    first = await sampler.sweep()
    assert isinstance(first, Sweep)
    assert (first.interval, first.failures, sampler.sweeps) == (5, {}, 1)
    live = sampler.live[G1]
    assert live.sample is first.samples[G1]
    assert live.updated_at == live.sample.taken_at
    assert first.at <= live.updated_at <= first.at + timedelta(seconds=30)
    assert live.cpu_percent is None  # needs two samples
    uuids = {name: [g.uuid for g in hive_cluster.host_config(name).gpus] for name in (G1, MIG)}
    assert [g.uuid for g in live.sample.gpus] == uuids[G1]
    slices = {f"gpu:{m.uuid}" for g in hive_cluster.host_config(MIG).gpus for m in g.mig}
    gpus = {f"gpu:{u}" for name in uuids for u in uuids[name]}
    expected_keys = {f"host:{G1}", f"host:{MIG}"} | slices | gpus
    assert set(sampler.metrics.keys()) == expected_keys
    ((t1, cpu, used, total),) = sampler.metrics.since(f"host:{G1}")
    assert t1 == live.sample.taken_at.timestamp()
    assert cpu is None
    assert total == live.sample.mem_total_mib
    assert used == live.sample.mem_total_mib - live.sample.mem_available_mib
    ((_, util, mem_used, temp, power),) = sampler.metrics.since(f"gpu:{uuids[G1][0]}")
    gpu0 = live.sample.gpus[0]
    assert (util, mem_used, temp, power) == (
        gpu0.util_gpu,
        gpu0.mem_used_mib,
        gpu0.temperature_c,
        gpu0.power_w,
    )

    await sampler.sweep()
    live = sampler.live[G1]
    assert live.cpu_percent is not None
    assert 0.0 <= live.cpu_percent <= 100.0
    points = sampler.metrics.since(f"host:{G1}")
    assert len(points) == 2
    assert points[1][1] == live.cpu_percent
    assert sampler.metrics.since(f"host:{G1}", t1) == [points[1]]  # only newer than `since`
    assert sampler.metrics.since("host:nowhere") == []
    doc = sampler.metrics.to_json(f"host:{G1}", HOST_FIELDS, 0)
    assert doc["fields"] == ["t", *HOST_FIELDS]
    assert doc["points"] == points

    # The ring buffer keeps `history` points.
    await sampler.sweep()
    await sampler.sweep()
    key = f"gpu:{uuids[MIG][0]}"
    assert len(sampler.metrics.since(key)) == 3
    assert len(sampler.metrics.since(f"host:{G1}")) == 3
    assert sampler.metrics.since(f"host:{G1}")[0][0] > t1  # the oldest was dropped
    assert len(sampler.metrics.to_json(key, GPU_FIELDS, 0)["points"][0]) == 1 + len(GPU_FIELDS)
    assert sampler.sweeps == 4


async def test_a_host_that_cannot_be_probed_never_breaks_the_sweep(
    make_local_host, make_pool
) -> None:
    good = make_local_host()
    bad = HostDecl("bad", transport="local", extra={"env": {"BROKEN": "a\0b"}})
    pool = make_pool([local_decl(good), bad])
    sampler = Sampler(pool, interval=5)
    sweep = await sampler.sweep()
    assert set(sweep.samples) == {good.name}
    assert "cannot start the local command" in sweep.failures["bad"]
    assert pool.status("bad").state == "down"
    assert sampler.live["bad"].sample is None


async def test_listeners_are_told_and_a_failing_one_does_not_stop_the_loop(
    make_local_host, make_pool, caplog
) -> None:
    hosts = [make_local_host(), make_local_host()]
    sampler = Sampler(make_pool([local_decl(h) for h in hosts]), interval=0.2)
    seen: list[Sweep] = []

    async def failing(sweep: Sweep) -> None:
        raise RuntimeError("listener bug")

    async def recording(sweep: Sweep) -> None:
        seen.append(sweep)

    sampler.on_sweep(failing)
    sampler.on_sweep(recording)
    task = asyncio.ensure_future(sampler.run())
    try:
        assert await until(lambda: sampler.sweeps >= 4, timeout=15), sampler.sweeps
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert len(seen) >= 4
    assert all(set(s.samples) == {h.name for h in hosts} for s in seen)
    assert [s.at for s in seen] == sorted(s.at for s in seen)
    assert "a sweep listener failed" in caplog.text
    assert "listener bug" in caplog.text
    # Cancelled means stopped: no sweep happens afterwards.
    count = sampler.sweeps
    await asyncio.sleep(0.6)
    assert sampler.sweeps == count


async def test_run_keeps_its_rhythm(make_local_host, make_pool) -> None:
    sampler = Sampler(make_pool([local_decl(make_local_host())]), interval=0.5)
    starts: list[float] = []

    async def record(sweep: Sweep) -> None:
        starts.append(sweep.at.timestamp())

    sampler.on_sweep(record)
    task = asyncio.ensure_future(sampler.run())
    try:
        assert await until(lambda: sampler.sweeps >= 4, timeout=15)
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # A sweep starts every `interval` (or at once after one that overran), never sooner.
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 0.45 for gap in gaps), gaps


class FlakySampler(Sampler):
    """A sampler whose second sweep fails outright (run() must carry on)."""

    async def sweep(self) -> Sweep:
        if self.sweeps == 1 and not getattr(self, "failed", False):
            self.failed = True
            raise RuntimeError("sweep bug")
        return await super().sweep()


async def test_run_survives_a_failing_sweep(make_local_host, make_pool, caplog) -> None:
    sampler = FlakySampler(make_pool([local_decl(make_local_host())]), interval=0.1)
    task = asyncio.ensure_future(sampler.run())
    try:
        assert await until(lambda: sampler.sweeps >= 3, timeout=15)
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sampler.failed
    assert "sweep failed; the sampler carries on" in caplog.text


async def test_cancel_during_a_hanging_probe_stops_at_once(make_local_host, make_pool) -> None:
    host = make_local_host()
    host.set_fault(hang=True)
    sampler = Sampler(make_pool([local_decl(host)]), interval=5, timeout=30)
    try:
        task = asyncio.ensure_future(sampler.run())
        await asyncio.sleep(1.0)  # the probe is hanging now
        assert sampler.sweeps == 0
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 1
        # ...and the hanging probe went with it (the stand-in still hangs, so it was killed).
        assert await until(lambda: not sim_processes(host.config_path), timeout=3)
    finally:
        host.clear_faults()
        kill_sim_processes(host.config_path)
