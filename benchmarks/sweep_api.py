"""API phase of the sweep benchmark: a real Jupyter server sweeping the sshd hosts, under load.

A ``jupyter server`` with gpuhive in its own process (fixtures/server.py) monitors the
benchmark's sshd hosts (``poll_interval`` 5 s, the cluster's client key and known_hosts, the
same uid-0 monitoring login). Once it has swept every host, two client threads each send
10 requests/s over keep-alive connections for the window: ``GET gpuhive/api/me`` and
``GET gpuhive/api/hosts`` (100 hosts × 4 GPUs with processes and owners), while the server's
sampler keeps sweeping. Latency is the round trip (request sent to body read).

Sweeps during the window are read from the hosts' ``updated_at`` (the sampler stamps each
host's sample when its probe returns): ``api_sweeps_seen`` counts the sweeps that completed in
the window. Sweeps start on a fixed ``poll_interval`` grid, each at least the stand-in delay
before its first stamp; the latest grid consistent with that gives each sweep's in-flight span
(a lower bound, ``api_sweep_spans_s``), and the requests sent inside one are reported apart
(``api_*_in_sweep_p99_ms``). ``api_server_cpu_s_per_sweep``: the server process's own CPU
over the window per sweep; ``--api-nice`` (diagnostic) renices the server. During this phase
the simulated hosts are set apart (a CPU cgroup of least weight, else nice 19; see
``_hosts_set_apart``, ``api_hosts_apart`` in the result; ``--api-hosts-shared`` turns it off).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from sweep_sshd import RealCluster, percentile  # noqa: E402

from tests.support.server import JupyterServer  # noqa: E402

USER_TOKEN = "tok-sweep-bench"
RATE = 10.0  # requests per second, per endpoint
INTERVAL = 5.0  # the server's poll_interval


class _Conn:
    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"token {token}"}

    def get(self, path: str) -> tuple[int, bytes, float, float]:
        """(status, body, send wall time, round trip in seconds)."""
        sent, t0 = time.time(), time.perf_counter()
        self.conn.request("GET", "/gpuhive/api/" + path, headers=self.headers)
        response = self.conn.getresponse()
        body = response.read()
        return response.status, body, sent, time.perf_counter() - t0


def _stamps(body: bytes) -> dict[str, float]:
    hosts = json.loads(body)["hosts"]
    return {
        h["name"]: datetime.fromisoformat(h["updated_at"]).timestamp()
        for h in hosts
        if h.get("updated_at")
    }


def _wait_first_sweep(port: int, count: int, timeout: float) -> float:
    conn, t0 = _Conn(port, USER_TOKEN), time.perf_counter()
    while True:
        status, body, _, _ = conn.get("hosts")
        if status == 200:
            hosts = json.loads(body)["hosts"]
            up = [h for h in hosts if h.get("updated_at") and not h.get("gpu_error")]
            if len(up) == count:
                return time.perf_counter() - t0
        else:
            hosts = []
        if time.perf_counter() - t0 > timeout:
            states = {h["name"]: (h.get("state"), h.get("last_error")) for h in hosts[:3]}
            raise RuntimeError(f"the server did not sweep every host in {timeout} s: {states}")
        time.sleep(0.5)


def _paced(
    port: int, path: str, seconds: float, rows: list[tuple[float, float, bytes | None]]
) -> None:
    """GET `path` RATE times a second for `seconds` (sent late when the last one was slow)."""
    conn = _Conn(port, USER_TOKEN)
    start = time.perf_counter()
    for i in range(int(seconds * RATE)):
        wait = start + i / RATE - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        status, body, sent, took = conn.get(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body[:200]!r}")
        rows.append((sent, took, body if path == "hosts" else None))


def _sweep_windows(
    stamps: list[dict[str, float]], interval: float, lead: float
) -> list[tuple[float, float]]:
    """(start, end) of every sweep seen, from the hosts' stamps (see the module docstring)."""
    seen = sorted({t for s in stamps for t in s.values()})
    groups: list[list[float]] = []
    for t in seen:
        if groups and t - groups[-1][1] <= 1.0:
            groups[-1][1] = t
        else:
            groups.append([t, t])
    if not groups:
        return []
    base = groups[0][0] - lead - interval / 2  # centred: first-stamp jitter does not wrap
    phase = min((first - lead - base) % interval for first, _ in groups)
    windows = []
    for first, last in groups:
        start = base + phase + interval * ((first - lead - base - phase) // interval)
        windows.append((start, last))
    return windows


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_api(
    real: RealCluster,
    seconds: float,
    log: Callable[[str], None],
    *,
    delay_s: float = 0.3,
    nice: int = 0,
    hosts_apart: bool = True,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Start the server on `real`'s hosts, wait for a full sweep, then load the API."""
    with _hosts_set_apart(real, hosts_apart) as how:
        return _measure_api(real, seconds, log, delay_s, nice, timeout) | {"api_hosts_apart": how}


CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")


@contextlib.contextmanager
def _hosts_set_apart(real: RealCluster, wanted: bool) -> Iterator[str]:
    """Put the simulated hosts' sshd (so every session, shell and stand-in they start from
    now on) in a CPU cgroup of the least weight, or at nice 19 where there is no cgroup to
    make; yields how ("cgroup", "nice" or "none").

    They stand in for other machines: at a sweep's start 100 of them fork some 300 processes
    on this machine's 2 cores, which would delay the server and the measuring client alike
    (the benchmark's own idle event loop lags ~60 ms then). Set apart, they run on the CPU
    left over, as remote hosts would, and the API figures measure the server.
    """
    pids = [h.process.pid for h in real.cluster if h.process and h.process.poll() is None]
    group = CGROUP_V1_CPU / f"gpuhive-bench-hosts-{os.getpid()}"
    how = "none"
    if wanted:
        try:
            group.mkdir()
            (group / "cpu.shares").write_text("2")
            for pid in pids:
                (group / "cgroup.procs").write_text(str(pid))
            how = "cgroup"
        except OSError:
            _cgroup_drain(group)
            for pid in pids:
                os.setpriority(os.PRIO_PROCESS, pid, 19)
            how = "nice"
    try:
        yield how
    finally:
        if how == "cgroup":
            _cgroup_drain(group)
        elif how == "nice":
            # Raising a priority back needs CAP_SYS_NICE (a container may lack it); the hosts
            # are the benchmark's own and end with it, so a refusal only leaves them niced.
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.setpriority(os.PRIO_PROCESS, pid, 0)


def _cgroup_drain(group: Path) -> None:
    """Move every process of `group` back to the root cgroup and remove it."""
    if not group.is_dir():
        return
    for _ in range(5):
        pids = (group / "cgroup.procs").read_text().split()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):  # gone meanwhile
                (CGROUP_V1_CPU / "cgroup.procs").write_text(pid)
    with contextlib.suppress(OSError):
        group.rmdir()


def _measure_api(
    real: RealCluster,
    seconds: float,
    log: Callable[[str], None],
    delay_s: float,
    nice: int,
    timeout: float,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gpuhive-sweep-api-"))
    hive = {
        "db_url": f"sqlite:///{workdir / 'hive.sqlite'}",
        "hosts": [
            {"name": h.name, "address": h.address, "port": h.port, "user": real.monitor}
            for h in real.cluster
        ],
        "ssh_key": str(real.cluster.client_key),
        "known_hosts": [str(real.cluster.known_hosts)],
        "poll_interval": INTERVAL,
        "monitor": True,
        "ssh_connect_timeout": 20.0,
    }
    t0 = time.perf_counter()
    try:
        server = JupyterServer(hive, {USER_TOKEN: {"name": "bench"}})
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        if nice:
            os.setpriority(os.PRIO_PROCESS, server.process.pid, nice)
        log(f"API: server up in {time.perf_counter() - t0:.1f} s; waiting for its first sweep")
        first = _wait_first_sweep(server.port, len(real.cluster), timeout)
        log(f"API: every host swept after {first:.1f} s; loading the API for {seconds:.0f} s")
        me: list[tuple[float, float, bytes | None]] = []
        hosts: list[tuple[float, float, bytes | None]] = []
        threads = [
            threading.Thread(target=_paced, args=(server.port, "me", seconds, me)),
            threading.Thread(target=_paced, args=(server.port, "hosts", seconds, hosts)),
        ]
        window0, cpu0 = time.time(), _cpu_s(server.process.pid)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        window1, server_cpu = time.time(), _cpu_s(server.process.pid) - cpu0
        if server.process.poll() is not None:
            raise RuntimeError("the server died during the API phase")
        log_text = (server.dir / "server.log").read_text(errors="replace")
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    stamps = [_stamps(body) for _, _, body in hosts if body is not None]
    per_host: dict[str, set[float]] = {}
    for s in stamps:
        for name, t in s.items():
            per_host.setdefault(name, set()).add(t)
    sweeps_seen = statistics.median(
        sum(1 for t in ts if window0 <= t <= window1) for ts in per_host.values()
    )
    windows = [w for w in _sweep_windows(stamps, INTERVAL, delay_s) if w[1] >= window0]

    def in_sweep(sent: float) -> bool:
        return any(a <= sent <= b for a, b in windows)

    def ms(rows: list[tuple[float, float, bytes | None]], pct: float, only: bool = False) -> float:
        took = [t for sent, t, _ in rows if not only or in_sweep(sent)]
        value = statistics.median(took) if pct == 50 else percentile(took, pct)
        return round(value * 1000, 1) if took else float("nan")

    result = {
        "api_me_p50_ms": ms(me, 50),
        "api_me_p99_ms": ms(me, 99),
        "api_hosts_p50_ms": ms(hosts, 50),
        "api_hosts_p99_ms": ms(hosts, 99),
        "api_sweeps_seen": int(sweeps_seen),
        "api_me_in_sweep_p99_ms": ms(me, 99, only=True),
        "api_hosts_in_sweep_p99_ms": ms(hosts, 99, only=True),
        "api_requests_in_sweep": sum(1 for sent, _, _ in me + hosts if in_sweep(sent)),
        "api_requests": len(me) + len(hosts),
        "api_sweep_spans_s": [round(b - a, 2) for a, b in windows],
        "api_server_cpu_s_per_sweep": round(server_cpu / max(1.0, sweeps_seen), 2),
        "api_first_sweep_s": round(first, 1),
        "api_window_s": round(window1 - window0, 1),
        "api_max_ms": round(max(t for _, t, _ in me + hosts) * 1000, 1),
        **({"api_server_nice": nice} if nice else {}),
    }
    errors = [line for line in log_text.splitlines() if "Traceback" in line or " E " in line]
    if errors:
        result["api_server_errors"] = len(errors)
    log(
        f"API: me p50 {result['api_me_p50_ms']} / p99 {result['api_me_p99_ms']} ms, hosts p50 "
        f"{result['api_hosts_p50_ms']} / p99 {result['api_hosts_p99_ms']} ms; "
        f"{result['api_sweeps_seen']} sweeps in the window, spans {result['api_sweep_spans_s']}"
    )
    return result
