"""Real-sshd part of the sweep benchmark: the cluster, our pool's sweep, the floor, loop lag.

The monitoring account: the stand-in finds GPU processes by reading ``/proc/PID/environ``,
which only root (or the owner) may read, so the monitor must be uid 0. Root's own
``~/.bashrc`` on this machine runs ``pyenv init`` (≈120 ms CPU per command, see NOTES.md),
which would measure pyenv rather than the pool; like the documented monitoring account with a
minimal shell rc, the benchmark logs in as a uid-0 alias with ``/bin/sh`` and an empty home,
created for the run and deleted afterwards (``--monitor-user root`` measures root as is).

The stand-in (``--stand-in``): ``sim`` is the project's ``nvidia-smi`` stand-in, which derives
every answer from /proc on every call (a Python process, ~15-60 ms CPU each; on 2 cores it makes
the 100-host sweeps CPU-bound). ``replay`` (``install_replay``) records, once per host while its
GPU processes run, the real stand-in's answer to every argument set the probe and the baseline
ask, and puts a POSIX shell script in its place on the hosts' PATH that sleeps the stand-in
delay and prints the recorded answer (``sh`` + ``sleep`` + ``cat``, ~2 ms CPU). The PIDs in the
answers are the real GPU processes', so ``ps`` still finds their real owners. Our probe and the
baseline reach the same script, so the comparison stays fair.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pwd
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncssh
from sweep_baseline import baseline_nvidia_smi_args

from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.hosts.probe import (
    END,
    PROBE_COMMAND,
    PROBE_LOOP_COMMAND,
    HostSample,
)
from jupyter_gpuhive.hosts.vendors.nvidia_probe import BASE_FIELDS, GPU_FIELDS, HELP_QUERY
from jupyter_gpuhive.hosts.vendors.nvidia_smi import QUERY_APPS_FIELDS
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.sim import nvidia_smi
from jupyter_gpuhive.sim.inventory import CONFIG_ENV, HOST_ENV
from jupyter_gpuhive.sim.sshd import SshdCluster
from jupyter_gpuhive.sim.users import ensure_user, start_gpu_process

MONITOR_ALIAS = "ghbenchmon"
TEST_USERS = ("ghbench1", "ghbench2")
GPUS_PER_HOST = 4
PROCS_PER_HOST = 2


@contextlib.contextmanager
def monitor_account(name: str) -> Iterator[str]:
    """A uid-0 login with /bin/sh and an empty home (removed on exit); 'root' is used as is."""
    if name == "root":
        yield name
        return
    try:
        pwd.getpwnam(name)
        made = False
    except KeyError:
        home = tempfile.mkdtemp(prefix="gpuhive-bench-mon-")
        os.chmod(home, 0o755)
        subprocess.run(
            ["useradd", "-o", "-u", "0", "-g", "0", "-M", "-d", home, "-s", "/bin/sh", name],
            check=True,
            capture_output=True,
        )
        subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)
        made = True
    try:
        yield name
    finally:
        if made:
            home = pwd.getpwnam(name).pw_dir
            subprocess.run(["userdel", "-f", name], check=False, capture_output=True)
            shutil.rmtree(home, ignore_errors=True)


@dataclass
class RealCluster:
    """Running sshd hosts with GPU processes owned by test users."""

    cluster: SshdCluster
    monitor: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def decls(self) -> list[HostDecl]:
        return [HostDecl(h.name, h.address, h.port, self.monitor, "ssh") for h in self.cluster]

    def settings(self) -> SshSettings:
        return SshSettings(
            client_keys=[str(self.cluster.client_key)],
            known_hosts=[str(self.cluster.known_hosts)],
            connect_timeout=20.0,
            command_timeout=60.0,
        )

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self.cluster.stop()


def start_cluster(count: int, monitor: str, delay_s: float) -> RealCluster:
    """`count` sshd hosts (a100x4), the stand-in answering after `delay_s`, 2 GPU processes each."""
    for user in TEST_USERS:
        ensure_user(user)
    cluster = SshdCluster([f"bench{i:03d}" for i in range(count)], profile="a100x4")
    cluster.start()
    real = RealCluster(cluster, monitor)
    try:
        for user in TEST_USERS:
            cluster.add_user(user)
        for i, host in enumerate(cluster):
            cluster.set_fault(host.name, delay_s=delay_s)
            for k, user in enumerate(TEST_USERS):
                gpu = (i + k) % GPUS_PER_HOST
                real.procs.append(
                    start_gpu_process(
                        host.name,
                        [gpu],
                        user=user,
                        command=("sleep", "1800"),
                        mem_mib=1024 * (k + 1) + i,
                        util=30 + 20 * k,
                    )
                )
    except BaseException:
        real.stop()
        raise
    return real


def probe_nvidia_smi_args() -> list[list[str]]:
    """The nvidia-smi argument lists PROBE_COMMAND runs (kept in step with the NVIDIA probe):
    the field list once per session, then the GPU query with the fields it lists (the
    stand-in knows them all: the base fields, then the others in GPU_FIELDS' order)."""
    asked = (*BASE_FIELDS, *(f for f in GPU_FIELDS if f not in BASE_FIELDS))
    args = [
        HELP_QUERY.split()[1:],
        [f"--query-gpu={','.join(asked)}", "--format=csv,nounits"],
        [f"--query-compute-apps={','.join(QUERY_APPS_FIELDS)}", "--format=csv,nounits"],
        ["-L"],
    ]
    for shown in (HELP_QUERY, " ".join(args[2])):
        if shown not in PROBE_COMMAND:
            raise RuntimeError(f"the probe no longer runs {shown}")
    return args


def install_replay(real: RealCluster, delay_s: float) -> int:
    """Record every host's answers and replace the hosts' nvidia-smi with the replay script.

    Returns how many answers were recorded. Every argument set must answer with status 0.
    """
    cluster = real.cluster
    arg_sets = [*probe_nvidia_smi_args(), *baseline_nvidia_smi_args(GPUS_PER_HOST)]
    store = cluster.bin_dir / ".gpuhive-replay"
    for host in cluster:
        env = {CONFIG_ENV: str(host.config_path), HOST_ENV: host.name}
        hostdir = store / host.name
        hostdir.mkdir(parents=True, exist_ok=True)
        for k, argv in enumerate(arg_sets):
            out = io.StringIO()
            status = nvidia_smi.main(argv, env, out)
            if status != 0:
                raise RuntimeError(f"stand-in {argv} on {host.name}: status {status}")
            (hostdir / str(k)).write_text(out.getvalue(), encoding="utf-8")
    for path in [store, *store.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    cases = "\n".join(f"  '{' '.join(argv)}') k={k} ;;" for k, argv in enumerate(arg_sets))
    script = (
        "#!/bin/sh\n"
        "# nvidia-smi replay of the gpuhive sweep benchmark (benchmarks/sweep_sshd.py)\n"
        'case "$*" in\n'
        f"{cases}\n"
        '  *) echo "nvidia-smi replay: no recorded answer for: $*" >&2; exit 2 ;;\n'
        "esac\n"
        f"sleep {delay_s:g}\n"
        f'exec cat {store}/"${{{HOST_ENV}}}"/$k\n'
    )
    tmp = cluster.bin_dir / ".nvidia-smi.replay"
    tmp.write_text(script, encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, cluster.bin_dir / "nvidia-smi")
    return len(arg_sets) * len(cluster)


def check_sample(sample: HostSample) -> str | None:
    """Why a sample is not what the cluster holds (4 GPUs, 2 owned processes), or None."""
    if sample.gpu_error:
        return sample.gpu_error
    if len(sample.gpus) != GPUS_PER_HOST:
        return f"{len(sample.gpus)} GPUs"
    owners = sorted(p.user or "?" for p in sample.processes)
    if owners != sorted(TEST_USERS):
        return f"processes owned by {owners}"
    return None


def machine_cpu_s() -> float:
    """CPU seconds this machine has been busy since boot (all cores, from /proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


@dataclass
class SweepResult:
    seconds: float
    cpu_s: float  # this process (the client)
    failed: int
    bad: dict[str, str]
    machine_cpu_s: float = 0.0  # the whole machine: client, sshd, shells, stand-ins


def sampler_for(pool: HostPool) -> Sampler:
    """The product's sampler on `pool`, with the pool's command timeout per probe."""
    return Sampler(pool, interval=5.0, timeout=pool.settings.command_timeout)


async def pool_sweep(sampler: Sampler) -> SweepResult:
    """One sweep as gpuhive does it: `Sampler.sweep()` (one request per host to its kept
    probe loop, parse, record), without listeners."""
    busy0, cpu0, t0 = machine_cpu_s(), time.process_time(), time.perf_counter()
    sweep = await sampler.sweep()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    busy = machine_cpu_s() - busy0
    bad = dict(sweep.failures)
    for name, sample in sweep.samples.items():
        why = check_sample(sample)
        if why:
            bad[name] = why
    return SweepResult(seconds, cpu, len(sweep.failures), bad, busy)


async def floor_sweep(conns: list[asyncssh.SSHClientConnection]) -> SweepResult:
    """The floor: a bare gather of one conn.run(PROBE_COMMAND) per pre-opened connection."""
    busy0, cpu0, t0 = machine_cpu_s(), time.process_time(), time.perf_counter()
    done = await asyncio.gather(*(c.run(PROBE_COMMAND) for c in conns))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    failed = sum(1 for d in done if d.exit_status != 0)
    return SweepResult(seconds, cpu, failed, {}, machine_cpu_s() - busy0)


async def open_stream_floor(conns: list[asyncssh.SSHClientConnection]) -> list[Any]:
    """A PROBE_LOOP_COMMAND session on each connection, bare (no pool)."""
    return list(await asyncio.gather(*(c.create_process(PROBE_LOOP_COMMAND) for c in conns)))


async def stream_floor_sweep(loops: list[Any], sweep_no: int) -> SweepResult:
    """The same pattern as ours, bare: write a token to every loop, gather the answers."""
    busy0, cpu0, t0 = machine_cpu_s(), time.process_time(), time.perf_counter()

    async def one(process: Any) -> str:
        token = f"floor{sweep_no}"
        process.stdin.write(f"{token}\n")
        return str(await process.stdout.readuntil(f"{END}{token}\n"))

    done = await asyncio.gather(*(one(p) for p in loops))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    failed = sum(1 for d in done if f"{GPU_FIELDS[0]}" not in d)
    return SweepResult(seconds, cpu, failed, {}, machine_cpu_s() - busy0)


async def open_floor(decls: list[HostDecl], settings: SshSettings) -> list[Any]:
    async def one(d: HostDecl) -> asyncssh.SSHClientConnection:
        for attempt in range(5):
            try:
                return await asyncssh.connect(
                    d.address,
                    port=d.port,
                    username=d.user,
                    client_keys=settings.client_keys,
                    known_hosts=settings.known_hosts,
                    agent_path=None,
                    config=[],
                )
            except (OSError, asyncssh.Error):
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    return list(await asyncio.gather(*(one(d) for d in decls)))


async def warm_pool(sampler: Sampler, tries: int = 6) -> SweepResult:
    """Sweep until every host answers (connections opened); waits out backoffs."""
    pool = sampler.pool
    result = await pool_sweep(sampler)
    for _ in range(tries):
        if not result.failed:
            return result
        await asyncio.sleep(
            max(0.0, max(s.retry_at for s in pool.statuses().values()) - time.monotonic()) + 0.1
        )
        result = await pool_sweep(sampler)
    raise RuntimeError(f"hosts did not come up: {dict(list(result.bad.items())[:5])}")


async def with_loop_lag(
    work: Callable[[], Awaitable[Any]], period: float = 0.01
) -> tuple[Any, list[float]]:
    """Run `work` while a ticker sleeps `period` in a loop; return its result and overshoots."""
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(period)
            lags.append(max(0.0, time.perf_counter() - t0 - period))

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        result = await work()
    finally:
        stop.set()
        await task
    return result, lags


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


async def measure_real(real: RealCluster, repeats: int, log: Callable[[str], None]) -> dict:
    """Our sweep and both floors (interleaved, medians), loop lag during our sweep."""
    decls, settings = real.decls, real.settings()
    pool = HostPool(decls, settings)
    sampler = sampler_for(pool)
    conns: list[Any] = []
    loops: list[Any] = []
    try:
        t0 = time.perf_counter()
        first = await warm_pool(sampler)
        log(f"pool: {len(decls)} hosts connected and swept in {time.perf_counter() - t0:.2f} s")
        if first.bad:
            raise RuntimeError(f"probe results wrong: {dict(list(first.bad.items())[:5])}")
        conns = await open_floor(decls, settings)  # opened, not warmed: sweeps are ~CPU-bound
        loops = await open_stream_floor(conns)
        await stream_floor_sweep(loops, -1)  # warm, as the pool's loops are (owners known)
        lagged, lags = await with_loop_lag(lambda: pool_sweep(sampler))
        log(
            f"loop lag during a sweep of {lagged.seconds:.2f} s: p99 "
            f"{percentile(lags, 99) * 1000:.1f} ms, max {max(lags) * 1000:.1f} ms"
        )
        sweeps, floors, streams = [], [], []
        for i in range(repeats):
            runs: dict[str, SweepResult] = {}
            order = ["ours", "floor", "stream"]
            for name in order[i % 3 :] + order[: i % 3]:  # each goes first in turn
                if name == "ours":
                    runs[name] = await pool_sweep(sampler)
                elif name == "floor":
                    runs[name] = await floor_sweep(conns)
                else:
                    runs[name] = await stream_floor_sweep(loops, i)
            s, f, st = runs["ours"], runs["floor"], runs["stream"]
            if s.failed or s.bad or f.failed or st.failed:
                raise RuntimeError(
                    f"sweep failed: {s.failed} {f.failed} {st.failed} {list(s.bad.items())[:5]}"
                )
            sweeps.append(s)
            floors.append(f)
            streams.append(st)
            log(
                f"sweep {s.seconds:.3f} s (client CPU {s.cpu_s:.2f} s, machine "
                f"{s.machine_cpu_s:.1f} CPU-s); floor {f.seconds:.3f} s (client CPU "
                f"{f.cpu_s:.2f} s, machine {f.machine_cpu_s:.1f} CPU-s); stream floor "
                f"{st.seconds:.3f} s (client CPU {st.cpu_s:.2f} s, machine "
                f"{st.machine_cpu_s:.1f} CPU-s)"
            )
        return {
            "sweep_s": statistics.median(r.seconds for r in sweeps),
            "floor_s": statistics.median(r.seconds for r in floors),
            "stream_floor_s": statistics.median(r.seconds for r in streams),
            "sweep_client_cpu_s": statistics.median(r.cpu_s for r in sweeps),
            "floor_client_cpu_s": statistics.median(r.cpu_s for r in floors),
            "sweep_machine_cpu_s": statistics.median(r.machine_cpu_s for r in sweeps),
            "floor_machine_cpu_s": statistics.median(r.machine_cpu_s for r in floors),
            "stream_floor_machine_cpu_s": statistics.median(r.machine_cpu_s for r in streams),
            "loop_lag_p99_ms": percentile(lags, 99) * 1000,
            "loop_lag_max_ms": max(lags) * 1000,
        }
    finally:
        for process in loops:
            process.close()
        for conn in conns:
            conn.close()
        await pool.close()


async def measure_sweeps(pool: HostPool, repeats: int, log: Callable[[str], None]) -> dict:
    """Warm `pool` up, sweep once under the loop-lag ticker, then time `repeats` sweeps."""
    sampler = sampler_for(pool)
    t0 = time.perf_counter()
    first = await warm_pool(sampler)
    n = len(pool.hosts)
    log(f"pool: {n} hosts connected and swept in {time.perf_counter() - t0:.2f} s")
    if first.bad:
        raise RuntimeError(f"probe results wrong: {dict(list(first.bad.items())[:5])}")
    lagged, lags = await with_loop_lag(lambda: pool_sweep(sampler))
    log(
        f"loop lag during a {n}-host sweep of {lagged.seconds:.2f} s: p99 "
        f"{percentile(lags, 99) * 1000:.1f} ms, max {max(lags) * 1000:.1f} ms"
    )
    sweeps = []
    for _ in range(repeats):
        r = await pool_sweep(sampler)
        if r.failed or r.bad:
            raise RuntimeError(f"sweep failed: {r.failed} {dict(list(r.bad.items())[:5])}")
        sweeps.append(r)
        log(f"{n}-host sweep {r.seconds:.3f} s (client CPU {r.cpu_s:.2f} s)")
    return {
        "sweep_s": statistics.median(r.seconds for r in sweeps),
        "client_cpu_s": statistics.median(r.cpu_s for r in sweeps),
        "loop_lag_p99_ms": percentile(lags, 99) * 1000,
    }
