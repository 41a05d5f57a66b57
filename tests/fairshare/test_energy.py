"""Energy from a scripted power series of the nvidia-smi stand-in, against a hand computation
(trapezoid rule; a reading missing or a gap longer than max_gap charges no energy)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.model import UTC, utcnow
from jupyter_gpuhive.monitor.accounting import Meter
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.sim.core import NA
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import gpu_charges_hourly
from tests.protection.conftest import local_decl

MAX_GAP = 4.0
# Watts of every GPU at each sweep; None: the driver answers [N/A]; GAP: wait past max_gap.
GAP = "gap"
SERIES: list[Any] = [100.0, 300.0, 300.0, 50.0, None, 200.0, GAP, 200.0, 120.0]


async def run(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def totals(store: Store) -> dict[tuple[str, str], dict[str, float]]:
    """Charged figures per (payer, kind), straight from the table."""
    h = gpu_charges_hourly
    with store.db.read() as conn:
        rows = conn.execute(h.select()).all()
    out: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        into = out.setdefault((row.payer, row.kind), {"energy_j": 0.0, "seconds": 0.0,
                                                      "unmetered_seconds": 0.0})  # fmt: skip
        for name in into:
            into[name] += getattr(row, name)
    return out


async def test_energy_is_the_integral_of_the_scripted_power_series(
    make_local_host: Any, store: Store
) -> None:
    host = make_local_host()
    decl = local_decl(host)
    store.inventory.sync([decl])
    pool = HostPool([decl])
    monitor = Monitor(store, pool, run, interval=0.5, **unwired(pool))
    monitor.sampler.timeout = 5.0
    monitor.on_sweep(Meter(store, run, UTC, max_gap=MAX_GAP).on_sweep)
    try:
        first = await monitor.sampler.sweep()  # discovery: the GPUs join the inventory
        gpu0 = store.inventory.gpu(f"{host.name}:0")
        assert gpu0 is not None
        start = utcnow() - timedelta(seconds=1)
        res = store.reservations.create("alice", "run", "", start, start + timedelta(hours=2),
                                        [gpu0.id])  # fmt: skip
        seen: list[tuple[Any, float | None]] = [(first.samples[host.name].taken_at, 55.0)]
        for watts in SERIES:
            if watts == GAP:
                await asyncio.sleep(MAX_GAP + 0.5)
                continue
            config = host.config
            config.gpus = [
                dataclasses.replace(g, idle_power_w=watts or 55.0,
                                    unavailable={"power.draw": NA} if watts is None else {})
                for g in config.gpus
            ]  # fmt: skip
            host.write_config(config)
            sweep = await monitor.sampler.sweep()
            sample = sweep.samples[host.name]
            assert {g.power_w for g in sample.gpus} == {watts}
            seen.append((sample.taken_at, watts))
    finally:
        await monitor.stop()

    # by hand: the trapezoid rule over each pair of neighbouring samples of one GPU
    joules = metered = unmetered = 0.0
    for (t0, p0), (t1, p1) in itertools.pairwise(seen):
        seconds = (t1 - t0).total_seconds()
        if seconds > MAX_GAP:
            continue  # the gap: nothing charged
        if p0 is None or p1 is None:
            unmetered += seconds
            continue
        joules += (p0 + p1) / 2 * seconds
        metered += seconds
    assert joules > 0 and unmetered > 0

    found = totals(store)
    assert set(found) == {("alice", "reserved"), ("", "idle")}
    alice, nobody = found[("alice", "reserved")], found[("", "idle")]
    assert alice["energy_j"] == pytest.approx(joules, rel=1e-9)  # one GPU
    assert nobody["energy_j"] == pytest.approx(3 * joules, rel=1e-9)  # the three others
    assert alice["seconds"] == pytest.approx(metered + unmetered, rel=1e-9)
    assert alice["unmetered_seconds"] == pytest.approx(unmetered, rel=1e-9)
    (total,) = store.accounting.totals("reservation", [res.id]).values()
    assert total["energy_j"] == pytest.approx(joules, rel=1e-9)
