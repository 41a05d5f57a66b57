"""AMD stand-in hosts measured through the real pool (benchmarks/vendors.py's AMD figures).

`sweep_cost_ratio`: one AMD host (amd-smi's stand-in) and one NVIDIA host (nvidia-smi's) with
the same GPUs and the same processes (real processes of real users, pinned with each vendor's
variable), probed alternately through their own pools in the same run; the ratio of the
median probe times (the sampler's per-host latency), AMD over NVIDIA.

`misattributed`: real processes of several users on an AMD host, some of them intruders on
GPUs another user has booked; the processes whose owner or GPU the sweep got wrong or missed,
plus the intruders protection did not find.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.model import Gpu, HostDecl, Reservation, utcnow
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.protection.violations import DetectionPolicy, detect
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import ensure_user, is_root

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
USERS = ("gh-amd-alice", "gh-amd-bob", "gh-amd-carol")


@contextlib.contextmanager
def _shared() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpuhive-amdbench-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _host(root: Path, name: str, vendor: str) -> tuple[LocalSimHost, HostDecl]:
    """A simulated host with the MI300X preset's GPUs, read through `vendor`'s tool."""
    config = preset("mi300x", name)
    config.vendor = vendor
    if vendor == "nvidia":  # a current driver, the same GPUs
        config.driver_version, config.cuda_version = "550.90.07", "12.4"
    sim = LocalSimHost(name, root / name, config)
    env = sim.env({})
    extra = {"env": {k: env[k] for k in SIM_ENV}, "vendor": vendor}
    return sim, HostDecl(name, transport="local", extra=extra)


def _users() -> list[str | None]:
    if not is_root():
        return [None]  # this machine's own user only
    for user in USERS:
        ensure_user(user)
    return list(USERS)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def sweep_cost_ratio(smoke: bool) -> float:
    """Median AMD probe time over median NVIDIA probe time, same GPUs, same processes."""
    sweeps = 4 if smoke else 30
    users = _users()
    with _shared() as root:
        hosts = [_host(root, "amdc-nv", "nvidia"), _host(root, "amdc-am", "amd")]
        procs = [
            sim.start_process([i % 8], user=users[i % len(users)], mem_mib=256 + 64 * i)
            for sim, _ in hosts
            for i in range(12)
        ]
        try:
            times = asyncio.run(_alternate([decl for _, decl in hosts], sweeps))
        finally:
            _stop(procs)
    nv, am = (statistics.median(times[decl.name]) for _, decl in hosts)
    print(f"amd probe median {am * 1000:.1f} ms, nvidia {nv * 1000:.1f} ms ({sweeps} sweeps each)")
    return round(am / nv, 3)


async def _alternate(decls: list[HostDecl], sweeps: int) -> dict[str, list[float]]:
    """Each host's probe times: one pool each, probed in turn (never at once)."""
    pools = {decl.name: HostPool([decl]) for decl in decls}
    times: dict[str, list[float]] = {name: [] for name in pools}
    try:
        samplers = {name: Sampler(pool, interval=5.0, timeout=30) for name, pool in pools.items()}
        for round_ in range(sweeps + 1):
            for name, sampler in samplers.items():
                sweep = await sampler.sweep()
                if sweep.failures or sweep.samples[name].gpu_error:
                    raise RuntimeError(f"{name}: {sweep.failures or sweep.samples[name].gpu_error}")
                if round_:  # the first opens the probe loop (and amd-smi's static)
                    times[name].append(sweep.latency[name])
    finally:
        for pool in pools.values():
            await pool.close()
    return times


def misattributed(smoke: bool) -> int:
    """AMD GPU processes whose owner or GPU came back wrong or missing, plus intruders on
    booked GPUs that protection did not find (0)."""
    users = _users()
    count = 8 if smoke else 24
    with _shared() as root:
        sim, decl = _host(root, "amdm-am", "amd")
        uuids = [g.uuid for g in sim.config.gpus]
        # user k books GPUs k, k+3 (…); every 4th process runs on a GPU someone else booked
        holder = {g: users[g % len(users)] for g in range(8)}
        placed: list[tuple[str | None, int]] = []
        for i in range(count):
            gpu = i % 8
            intruder = i % 4 == 3 and len(users) > 1
            user = users[(users.index(holder[gpu]) + 1) % len(users)] if intruder else holder[gpu]
            placed.append((user, gpu))
        procs = [sim.start_process([uuids[g]], user=u, mem_mib=300) for u, g in placed]
        try:
            sample = asyncio.run(_one_sweep(decl))
        finally:
            _stop(procs)
    me = _whoami()
    want = {p.pid: (u or me, uuids[g]) for p, (u, g) in zip(procs, placed, strict=True)}
    got = {p.pid: (p.user, p.gpu_uuid) for p in sample.processes}
    wrong = sum(1 for pid, seen in want.items() if got.get(pid) != seen)
    wrong += sum(1 for pid in got if pid not in want)  # a process that is none of ours
    intruders = {p.pid for p, (u, g) in zip(procs, placed, strict=True) if u != holder[g]}
    now = utcnow()
    held = [
        Reservation(g + 1, holder[g] or me, "b", "", now - timedelta(hours=1),
                    now + timedelta(hours=1), (Gpu(g + 1, decl.name, g, uuids[g], None, None),), now)
        for g in range(8)
    ]  # fmt: skip
    found = {pid for v in detect([sample], held, now, DetectionPolicy.build(1)) for pid in v.pids}
    missed = len(intruders - found) + len(found - intruders)
    print(f"amd processes: {len(want)} placed, {len(got)} seen, {len(intruders)} intruders, "
          f"{len(found)} found by protection")  # fmt: skip
    return wrong + missed


async def _one_sweep(decl: HostDecl) -> Any:
    pool = HostPool([decl])
    try:
        sweep = await Sampler(pool, interval=5.0, timeout=30).sweep()
        if sweep.failures:
            raise RuntimeError(str(sweep.failures))
        return sweep.samples[decl.name]
    finally:
        await pool.close()


def _whoami() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name
