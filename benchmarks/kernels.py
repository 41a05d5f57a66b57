"""Kernels on reservations: a local ipykernel against a kernel on a reservation's sshd host.

Run: ``.venv/bin/python benchmarks/kernels.py [--quick | --smoke]`` (as root: the remote kernel runs as a
real test user, as it would for a reservation's owner; otherwise as the current user).

Both kernels are started by jupyter_client's AsyncIOLoopKernelManager with the same interpreter
(a venv every user can run, tests/support/kernel_python.py) and driven by an
AsyncKernelClient, on this machine: the local one by the default provisioner, the remote one by
the `gpuhive` provisioner on a reservation of a real sshd host on loopback (its own SSH
connection, Unix sockets forwarded over SSH). Measured the same way for both:

- start: from start_kernel to the first kernel_info reply (p50 over the starts);
- rtt: execute_request of ``pass`` to its execute_reply (p50, p99; after a warm-up);
- dead_detect_s (remote only): from killing the host's sshd (listener and sessions) to the
  kernel manager's restarter declaring the kernel dead, as a Jupyter server would see it (the
  kernel managers get the server's restarter class: `restarter_config`).

The last line printed is one JSON object with local_start_p50_s, remote_start_p50_s,
start_ratio, local_rtt_p50_ms, remote_rtt_p50_ms, rtt_overhead_ms, remote_rtt_p99_ms,
dead_detect_s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_client.ioloop import AsyncIOLoopKernelManager
from jupyter_client.kernelspec import KernelSpec
from traitlets.config import Config

from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.kernels.registry import KernelRegistry
from jupyter_gpuhive.model import Identity, utcnow
from jupyter_gpuhive.server.kernel_manager import restarter_config
from jupyter_gpuhive.sim.sshd import SshdCluster
from jupyter_gpuhive.sim.users import current_user, ensure_user, is_root
from jupyter_gpuhive.store import Store
from tests.support.kernel_python import kernel_python

HOST = "kbench1"
USER = "gh-alice"  # a test user with a plain shell rc (root's may start pyenv: slow logins)
START = time.perf_counter()


class _Kernels:
    """The registry the benchmark's kernel managers are handed (set once it exists)."""

    registry: KernelRegistry | None = None


KERNELS = _Kernels()
# Each kernel's manager gets the restarter class the server configures (jupyter_client's,
# mixed with kernels.restarts.FinalEnds): a kernel whose provisioner ended it for good (its
# host's connection lost) is declared dead at the restarter's next poll, not restarted onto
# a host that cannot be reached (a plain restarter would retry that start every poll).
KERNEL_CONFIG = restarter_config(Config())


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:6.1f}s] {message}", flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spec(python: str, reservation_id: int | None) -> KernelSpec:
    metadata = {}
    if reservation_id is not None:
        metadata["kernel_provisioner"] = {"provisioner_name": "gpuhive",
                                          "config": {"reservation_id": reservation_id}}  # fmt: skip
    return KernelSpec(argv=[python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                      display_name="bench", language="python", metadata=metadata)  # fmt: skip


async def start(kernel_spec: KernelSpec) -> tuple[AsyncIOLoopKernelManager, Any, float]:
    """A started kernel, its client, and the seconds to its first kernel_info reply."""
    km = AsyncIOLoopKernelManager(config=KERNEL_CONFIG)  # as the server configures it
    km.gpuhive_kernels = KERNELS.registry  # type: ignore[attr-defined]  # as the server does
    km._kernel_spec = kernel_spec
    began = time.perf_counter()
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=120)
    return km, kc, time.perf_counter() - began


async def stop(km: AsyncIOLoopKernelManager, kc: Any) -> None:
    kc.stop_channels()
    await km.shutdown_kernel(now=True)


async def rtt(kc: Any) -> float:
    """Milliseconds from execute_request of `pass` to its execute_reply."""
    began = time.perf_counter()
    await kc.execute("pass", reply=True, timeout=30)
    return (time.perf_counter() - began) * 1000


async def measure(specs: dict[str, KernelSpec], starts: int, executes: int) -> dict[str, Any]:
    """Starts and round trips of each kernel, taken in turns (the box's load hits both alike)."""
    times: dict[str, list[float]] = {name: [] for name in specs}
    rtts: dict[str, list[float]] = {name: [] for name in specs}
    for i in range(starts):
        order = list(specs) if i % 2 == 0 else list(reversed(specs))
        running = {}
        for name in order:
            km, kc, took = await start(specs[name])
            times[name].append(took)
            running[name] = (km, kc)
        if i == 0:
            for _ in range(20):  # warm-up
                for _km, kc in running.values():
                    await rtt(kc)
            for j in range(executes):
                for name in order if j % 2 == 0 else reversed(order):
                    rtts[name].append(await rtt(running[name][1]))
        for km, kc in running.values():
            await stop(km, kc)
    return {"start": times, "rtt": rtts}


async def dead_detect(cluster: SshdCluster, kernel_spec: KernelSpec) -> float:
    km, kc, _ = await start(kernel_spec)
    dead = asyncio.get_running_loop().create_future()
    km.add_restart_callback(lambda: dead.done() or dead.set_result(time.perf_counter()), "dead")
    await kc.execute("import time", reply=True, timeout=30)
    began = time.perf_counter()
    cluster.stop_host(HOST)
    try:
        at = await asyncio.wait_for(dead, 60)
    finally:
        kc.stop_channels()
        cluster.start_host(HOST)
    return at - began


async def main(quick: bool, smoke: bool = False) -> tuple[dict[str, float], float]:
    starts, executes = (1, 20) if smoke else (3, 300) if quick else (8, 2000)
    python = kernel_python()
    user = USER if is_root() else current_user()
    if is_root():
        ensure_user(USER)
    workdir = Path(tempfile.mkdtemp(prefix="gpuhive-bench-kernels-"))
    with SshdCluster([HOST]) as cluster:
        cluster.add_user(user)
        host = cluster[HOST]
        gpus = [{"index": g.index, "uuid": g.uuid} for g in cluster.host_config(HOST).gpus]
        decls = parse_hosts([{"name": HOST, "address": host.address, "port": host.port,
                              "gpus": gpus, "kernel_python": python}])  # fmt: skip
        store = Store(f"sqlite:///{workdir / 'hive.sqlite'}").open()
        store.inventory.sync(decls)
        pool = HostPool(decls, SshSettings(client_keys=[str(cluster.client_key)],
                                           known_hosts=[str(cluster.known_hosts)]))  # fmt: skip

        async def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(fn, *args, **kwargs)

        KERNELS.registry = KernelRegistry(store, pool, run, identity_of=Identity)
        gpu = store.inventory.gpu(f"{HOST}:0")
        assert gpu is not None
        begin = utcnow() - timedelta(seconds=1)
        res = store.reservations.create(user, "bench", "", begin, begin + timedelta(hours=2),
                                        [gpu.id])  # fmt: skip
        log(
            f"local and remote kernel ({python}; remote on {HOST} as {user} over sshd), "
            f"{starts} starts and {executes} executes each, in turns"
        )
        found = await measure({"local": spec(python, None), "remote": spec(python, res.id)},
                              starts, executes)  # fmt: skip
        log("dead detection: killing the host's sshd under a live kernel")
        dead = await dead_detect(cluster, spec(python, res.id))
        await pool.close()
        store.close()
    local_start = statistics.median(found["start"]["local"])
    remote_start = statistics.median(found["start"]["remote"])
    local_rtt = statistics.median(found["rtt"]["local"])
    remote_rtt = statistics.median(found["rtt"]["remote"])
    return {
        "local_start_p50_s": round(local_start, 3),
        "remote_start_p50_s": round(remote_start, 3),
        "start_ratio": round(remote_start / local_start, 2),
        "local_rtt_p50_ms": round(local_rtt, 2),
        "remote_rtt_p50_ms": round(remote_rtt, 2),
        "rtt_overhead_ms": round(remote_rtt - local_rtt, 2),
        "remote_rtt_p99_ms": round(pct(found["rtt"]["remote"], 0.99), 2),
        "dead_detect_s": round(dead, 2),
    }, round(pct(found["rtt"]["local"], 0.99), 2)


def arguments(doc: str) -> argparse.Namespace:
    """The kernel benchmarks' options (--quick, --smoke), their logging and environment."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer starts and executes")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    logging.basicConfig(level=logging.WARNING)
    os.environ.pop("JUPYTER_TOKEN", None)
    return parser.parse_args()


if __name__ == "__main__":
    args = arguments(__doc__)
    result, local_p99 = asyncio.run(main(args.quick, args.smoke))
    log(f"local start p50 {result['local_start_p50_s']} s, remote {result['remote_start_p50_s']}"
        f" s (x{result['start_ratio']}); rtt p50 {result['local_rtt_p50_ms']} ms local, "
        f"{result['remote_rtt_p50_ms']} ms remote (+{result['rtt_overhead_ms']} ms); p99 "
        f"{local_p99} ms local, {result['remote_rtt_p99_ms']} ms remote; dead detected in "
        f"{result['dead_detect_s']} s")  # fmt: skip
    print(json.dumps(result))
