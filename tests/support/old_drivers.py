"""Old-driver hosts monitored for real (benchmarks/vendors.py's `old_driver_hosts_blinded`).

A 418-style and a 470-style stand-in host (sim/generations.py), each with a real process on a
GPU, are swept by the real pool and sampler over the local transport. A host is blinded when
its GPUs come back unread (a GPU error or none of its GPUs) or its process is missing; the
fields each driver did not report are printed, as gpuhive shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
from pathlib import Path

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import CONFIG_ENV, HOST_ENV, preset

OLD_DRIVERS = {"old418": "418.87.00", "old470": "470.82.01"}


def _decl(host: LocalSimHost) -> HostDecl:
    env = host.env()
    keep = {k: env[k] for k in ("PATH", HOST_ENV, CONFIG_ENV)}
    return HostDecl(host.name, "localhost", 22, None, transport="local", extra={"env": keep})


async def _sweep(hosts: list[LocalSimHost]) -> dict[str, str | None]:
    """{host: why it is blinded, or None} after one real sweep."""
    procs = {h.name: h.start_process([1], mem_mib=700) for h in hosts}
    pool = HostPool([_decl(h) for h in hosts])
    try:
        sweep = await Sampler(pool, interval=5.0, timeout=30).sweep()
    finally:
        await pool.close()
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    verdicts: dict[str, str | None] = {}
    for host in hosts:
        sample = sweep.samples.get(host.name)
        if sample is None:
            verdicts[host.name] = f"no sample ({sweep.failures.get(host.name)})"
            continue
        wanted = [g.uuid for g in host.config.gpus]
        unread = sample.gpu_error or ([g.uuid for g in sample.gpus] != wanted and "GPUs missing")
        pids = {p.pid for p in sample.processes}
        verdicts[host.name] = unread or (
            None if procs[host.name].pid in pids else "its GPU process is missing"
        )
        shown = sorted({f"{field} ({why})" for g in sample.gpus for field, why in g.unreported})
        print(f"{host.name} (driver {host.config.driver_version}): not reported: {shown or 'none'}")
    return verdicts


def blinded_hosts() -> int:
    """How many of the old-driver hosts came back blinded (0 is right)."""
    with tempfile.TemporaryDirectory(prefix="gpuhive-olddrv-") as folder:
        hosts = []
        for name, driver in OLD_DRIVERS.items():
            config = preset("a100x4", name)
            config.driver_version = driver
            hosts.append(LocalSimHost(name, Path(folder) / name, config))
        verdicts = asyncio.run(_sweep(hosts))
    for name, why in verdicts.items():
        if why:
            print(f"{name}: blinded: {why}")
    return sum(1 for why in verdicts.values() if why)
