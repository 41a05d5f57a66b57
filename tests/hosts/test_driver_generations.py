"""Every NVIDIA driver generation is read, none blinds a host (issue #43 items 1 and 3).

The stand-in plays a 418, a 470, a 535 and a 570-style driver (sim/generations.py): the fields
each one accepts, its `--help-query-gpu` list, its XML element names and its failures. A real
probe goes through the real pool and sampler to each, with real processes on its GPUs.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.hosts.vendors.nvidia_fields import NOT_KNOWN, PLACEHOLDERS
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset, set_gpu_fault
from tests.hosts.helpers import local_decl

DRIVERS = {"418": "418.87.00", "470": "470.82.01", "535": "535.129.03", "570": "570.124.04"}


def sim_host(tmp_path: Path, name: str, driver: str, **knobs: object) -> LocalSimHost:
    config = preset("a100x4", name)
    config.driver_version = driver
    for knob, value in knobs.items():
        setattr(config, knob, value)
    return LocalSimHost(name, tmp_path / name, config)


async def sweep(*hosts: LocalSimHost):  # type: ignore[no-untyped-def]
    pool = HostPool([local_decl(h) for h in hosts])
    try:
        return await Sampler(pool, interval=5.0, timeout=30).sweep()
    finally:
        await pool.close()


@pytest.mark.parametrize("generation", ["418", "470", "535", "570"])
async def test_each_generation_is_read_with_its_processes(tmp_path: Path, generation: str) -> None:
    """A 418 driver has no mig.mode.current (before R450): its GPUs are read all the same, the
    field shown as not known to the driver, never as 0 or as MIG off."""
    name = f"dg{generation}"
    sim = sim_host(tmp_path, name, DRIVERS[generation])
    proc = sim.start_process([2], mem_mib=1500)
    try:
        done = await sweep(sim)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert done.failures == {}
    sample = done.samples[name]
    assert sample.gpu_error is None
    assert [g.uuid for g in sample.gpus] == [g.uuid for g in sim.config.gpus]
    assert all(g.mem_total_mib == 40960 and g.util_gpu is not None for g in sample.gpus)
    assert [(p.pid, p.gpu_uuid, p.used_memory_mib) for p in sample.processes] == [
        (proc.pid, sim.config.gpus[2].uuid, 1500)
    ]
    assert set(sample.health) == {g.uuid for g in sample.gpus}
    missing = {field for g in sample.gpus for field, why in g.unreported if why == NOT_KNOWN}
    if generation == "418":
        assert missing == {"mig.mode.current"}
        assert all(g.mig_enabled is None for g in sample.gpus)  # unknown, not "off"
    else:
        assert missing == set()
        assert all(g.mig_enabled is False for g in sample.gpus)


async def test_a_placeholder_is_not_reported_with_its_reason(tmp_path: Path) -> None:
    sim = sim_host(tmp_path, "dgph", DRIVERS["418"])
    config = sim.config
    config.gpus[0].unavailable = {"power.draw": "Insufficient Permissions"}
    config.gpus[1].unavailable = {"utilization.gpu": "Not Supported"}
    sim.write_config(config)
    sample = (await sweep(sim)).samples["dgph"]
    first, second = sample.gpus[0], sample.gpus[1]
    assert first.power_w is None and second.util_gpu is None  # never 0
    assert ("power.draw", PLACEHOLDERS["Insufficient Permissions"]) in first.unreported
    assert ("utilization.gpu", PLACEHOLDERS["Not Supported"]) in second.unreported
    assert first.util_gpu is not None and second.power_w is not None


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        ("not_loaded", "driver is not loaded"),
        ("nvml_mismatch", "differs from its library"),
        ("no_devices", "sees no GPU"),
    ],
)
async def test_a_driver_failure_is_a_state_a_person_understands(
    tmp_path: Path, failure: str, words: str
) -> None:
    """The stand-in prints each failure on stdout with a non-zero status, as nvidia-smi does;
    the host stays up (its CPU and memory read) and says what is wrong and what to do."""
    sick = sim_host(tmp_path, "dgsick", DRIVERS["570"], driver_failure=failure)
    well = sim_host(tmp_path, "dgwell", DRIVERS["535"])
    done = await sweep(sick, well)
    assert done.failures == {}
    sample = done.samples["dgsick"]
    assert sample.gpus == () and sample.cpu_count
    assert sample.gpu_error is not None and words in sample.gpu_error
    assert done.samples["dgwell"].gpu_error is None and len(done.samples["dgwell"].gpus) == 4


async def test_a_lost_gpu_costs_that_gpu_only_on_an_old_driver(tmp_path: Path) -> None:
    sim = sim_host(tmp_path, "dglost", DRIVERS["418"])
    set_gpu_fault(sim.config_path, 1, "lost")
    sample = (await sweep(sim)).samples["dglost"]
    assert sample.gpu_error is None
    assert len(sample.gpus) == 3 and sim.config.gpus[1].uuid not in {g.uuid for g in sample.gpus}
    assert [bus for bus, _ in sample.lost] == [sim.config.gpus[1].pci_bus_id[-12:].upper()]
