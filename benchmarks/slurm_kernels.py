"""Reservation kernels on a Slurm node against a local ipykernel (issue #47's kernel_start_ratio).

Run: ``.venv/bin/python benchmarks/slurm_kernels.py [--quick | --smoke]`` as root, where
Debian's Slurm 22.05 and munge are installed (`make sysdeps`); elsewhere it says why and
prints `{"skipped": WHY}` as its last line.

A real cluster (tests/support/slurm.py: slurmctld and two slurmd on this machine, fake GPUs)
holds a booking of the whole node n1 as the Slurm reservation gpuhive-N for a real test
user. Both kernels are started by jupyter_client's kernel manager with the same interpreter,
as benchmarks/kernels.py starts them (its `measure`, in turns): the local one by the default
provisioner, the Slurm one by the `gpuhive` provisioner as a step of the user's allocation
(salloc --no-shell, srun --overlap; its sockets through relay steps). Measured:

- start: from start_kernel to the first kernel_info reply (p50 over the starts); each Slurm
  start pays a new allocation (its shutdown cancels the last one);
- rtt: execute_request of ``pass`` to its execute_reply (p50), through the relay steps;
- death_noticed_s: from SIGKILL to the kernel's process on the node to the restarter's
  restart (Jupyter's auto-restarter polls every 3 s).

The last line printed is one JSON object with local_start_p50_s, slurm_start_p50_s,
kernel_start_ratio (the issue's figure: at most 3), local_rtt_p50_ms, slurm_rtt_p50_ms,
death_noticed_s.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kernels import KERNELS, arguments, log, measure, spec, start, stop
from jupyter_gpuhive.hosts.backends.slurm import slurm_uuid
from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.kernels.registry import KernelRegistry
from jupyter_gpuhive.model import Identity, utcnow
from jupyter_gpuhive.model.engines import engine_name
from jupyter_gpuhive.sim.users import ensure_user
from jupyter_gpuhive.store import Store
from tests.support.kernel_python import kernel_python
from tests.support.slurm import GPUS_PER_NODE, running_slurm, unavailable_reason

USER = "gh-alice"
NODE = "n1"


async def death_noticed(kernel_spec: Any) -> float:
    """Seconds from killing the kernel's process to the restarter's restart."""
    km, kc, _ = await start(kernel_spec)
    restarted = asyncio.get_running_loop().create_future()
    km.add_restart_callback(
        lambda: restarted.done() or restarted.set_result(time.perf_counter()), "restart"
    )
    await kc.execute("import time", reply=True, timeout=30)
    registry = KERNELS.registry
    assert registry is not None
    pid = registry.get(km.kernel_id).pid
    assert pid is not None
    began = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    try:
        at = await asyncio.wait_for(restarted, 60)
        # the restart's launch ends before the shutdown (the callback comes as it begins)
        async with asyncio.timeout(60):
            while registry.get(km.kernel_id).restarts < 1:  # noqa: ASYNC110 - the registry's
                await asyncio.sleep(0.1)
            await km.ready
    finally:
        await stop(km, kc)
    return at - began


def delete_reservation(cluster: Any, name: str) -> None:
    """Delete Slurm's reservation `name` (waiting while jobs in it are still ending)."""
    for _ in range(60):
        if cluster.scontrol("delete", f"reservationname={name}", check=False).returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"reservation {name} could not be deleted")


async def main(quick: bool, smoke: bool) -> dict[str, Any]:
    starts, executes = (1, 20) if smoke else (3, 200) if quick else (6, 1000)
    with running_slurm() as cluster:
        return await figures(cluster, starts, executes)


async def figures(cluster: Any, starts: int, executes: int) -> dict[str, Any]:
    """The kernel figures on a running cluster (its node n1 free): `starts` starts and
    `executes` executes of each kernel; the Slurm reservation made for it is deleted after
    (benchmarks/slurm.py measures them on its own cluster too)."""
    python = kernel_python()
    ensure_user(USER)
    workdir = Path(tempfile.mkdtemp(prefix="gpuhive-bench-slurm-kernels-"))
    gpus = [{"index": i, "uuid": slurm_uuid(NODE, NODE, i)} for i in range(GPUS_PER_NODE)]
    decls = parse_hosts([{"name": NODE, "transport": "slurm", "gpus": gpus,
                          "kernel_python": python,
                          "slurm": {"node": NODE, "conf": str(cluster.conf),
                                    "bin": cluster.bin}}])  # fmt: skip
    store = Store(f"sqlite:///{workdir / 'hive.sqlite'}").open()
    store.inventory.sync(decls)
    pool = HostPool(decls, SshSettings())

    async def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    KERNELS.registry = KernelRegistry(store, pool, run, identity_of=Identity)
    ids = []
    for i in range(GPUS_PER_NODE):
        gpu = store.inventory.gpu(f"{NODE}:{i}")
        assert gpu is not None
        ids.append(gpu.id)
    begin = utcnow() - timedelta(seconds=1)
    res = store.reservations.create(USER, "bench", "", begin, begin + timedelta(hours=2), ids)
    cluster.scontrol("create", "reservation", f"reservationname={engine_name(res.id)}",
                     f"users={USER}", f"nodes={NODE}", "starttime=now", "duration=120")  # fmt: skip
    log(f"local and Slurm kernel ({python}; on {NODE} as {USER}), {starts} starts and "
        f"{executes} executes each, in turns")  # fmt: skip
    found = await measure({"local": spec(python, None), "slurm": spec(python, res.id)},
                          starts, executes)  # fmt: skip
    log("death: killing the kernel's process on the node")
    death = await death_noticed(spec(python, res.id))
    await pool.close()
    store.close()
    await asyncio.to_thread(delete_reservation, cluster, engine_name(res.id))
    local_start = statistics.median(found["start"]["local"])
    slurm_start = statistics.median(found["start"]["slurm"])
    return {
        "local_start_p50_s": round(local_start, 3),
        "slurm_start_p50_s": round(slurm_start, 3),
        "kernel_start_ratio": round(slurm_start / local_start, 2),
        "local_rtt_p50_ms": round(statistics.median(found["rtt"]["local"]), 2),
        "slurm_rtt_p50_ms": round(statistics.median(found["rtt"]["slurm"]), 2),
        "death_noticed_s": round(death, 2),
    }


if __name__ == "__main__":
    args = arguments(__doc__)
    why = unavailable_reason()
    if why is not None:
        log(f"skipped: {why}")
        print(json.dumps({"skipped": why}))
        sys.exit(0)
    result = asyncio.run(main(args.quick, args.smoke))
    log(f"start p50 {result['local_start_p50_s']} s local, {result['slurm_start_p50_s']} s on "
        f"Slurm (x{result['kernel_start_ratio']}); rtt p50 {result['local_rtt_p50_ms']} ms "
        f"local, {result['slurm_rtt_p50_ms']} ms on Slurm; death noticed in "
        f"{result['death_noticed_s']} s")  # fmt: skip
    print(json.dumps(result))
