"""The GPU vendor seam is real: a second vendor, added with files under tests/ only, is swept.

`fakesmi` (tests/support/othervendor.py) has its own command line and JSON format. Registered
at run time, named by a host entry, it is probed by the real pool and sampler; its GPUs and
processes are read with their real owners, and protection finds an intruder on a reserved GPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.hosts.config import parse_host
from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.hosts.probe_command import probe_loop_command
from jupyter_gpuhive.hosts.vendors import register, unregister, vendor_named, vendor_of
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.model.violations import FOREIGN
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import ensure_user, start_gpu_process
from tests.hosts.helpers import intruders
from tests.support.othervendor import NAME, FakeSmiVendor, install_fakesmi

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture(autouse=True)
def fakesmi_known() -> Iterator[None]:
    """fakesmi is a known vendor during each test of this module, and only then (the other
    tests' lists of known vendors stay the site's)."""
    register(NAME, FakeSmiVendor)
    yield
    unregister(NAME)
    with pytest.raises(Invalid, match="No GPU vendor 'fakesmi'"):
        vendor_named(NAME)


@pytest.fixture
def fakesmi_host(tmp_path: Path) -> tuple[LocalSimHost, HostDecl]:
    """A simulated host whose vendor is fakesmi (registered for this test)."""
    sim = LocalSimHost("fv1", tmp_path / "sim", preset("a100x4", "fv1"))
    install_fakesmi(sim.bin_dir)
    env = sim.env({})
    extra = {"env": {k: env[k] for k in SIM_ENV}, "vendor": NAME}
    return sim, HostDecl("fv1", transport="local", extra=extra)


def test_a_host_entry_names_its_vendor_and_an_unknown_one_is_refused() -> None:
    assert isinstance(vendor_of(parse_host({"name": "h", "vendor": NAME}).extra), FakeSmiVendor)
    assert vendor_of(parse_host({"name": "h"}).extra) is vendor_named("nvidia")
    with pytest.raises(Invalid, match="No GPU vendor 'nosuch'"):
        vendor_of({"vendor": "nosuch"})


def test_the_probe_runs_the_hosts_own_vendor_tool() -> None:
    fake = probe_loop_command(vendor=FakeSmiVendor())
    assert "fakesmi report --json" in fake
    assert "--query-gpu" not in fake and "fakesmi" not in probe_loop_command()


async def test_a_sweep_reads_the_second_vendor_and_protection_finds_an_intruder(
    fakesmi_host: tuple[LocalSimHost, HostDecl],
) -> None:
    if os.geteuid() != 0:
        pytest.skip("starting processes as test users needs root")
    sim, decl = fakesmi_host
    for user in ("gh-alice", "gh-bob"):
        ensure_user(user)
    uuids = [g.uuid for g in sim.config.gpus]
    procs = [
        start_gpu_process("fv1", [1], user="gh-alice", config=sim.config_path, mem_mib=900),
        start_gpu_process("fv1", [1], user="gh-bob", config=sim.config_path, mem_mib=700),
    ]
    pool = HostPool([decl])
    try:
        sweep = await Sampler(pool, interval=5.0, timeout=30).sweep()
        assert sweep.failures == {}
        sample = sweep.samples["fv1"]
        assert sample.gpu_error is None
        assert [g.uuid for g in sample.gpus] == uuids
        owners = {p.pid: (p.user, p.gpu_uuid) for p in sample.processes}
        assert owners == {
            procs[0].pid: ("gh-alice", uuids[1]),
            procs[1].pid: ("gh-bob", uuids[1]),
        }
        found = intruders(sample, "fv1", (1, uuids[1]), "gh-alice")
        assert found == [(FOREIGN, "gh-bob", (procs[1].pid,))]
    finally:
        await pool.close()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
