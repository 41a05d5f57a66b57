"""The DDP proof (issue 5): a real PyTorch DDP all-reduce over two real sshd hosts.

Two `SshdCluster` hosts with 2 simulated GPUs each, a real Store (SQLite), HostPool and
Launcher. A job from the `pytorch` template runs a gloo all-reduce of `rank + 1` over the 4
GPUs: once in torchrun mode (2 nodes x 2 processes, one screen task per host) and once in
env mode (one task per GPU). Every rank must print the sum 1+2+3+4 = 10, WORLD_SIZE 4, a
distinct rank 0..3, and CUDA_VISIBLE_DEVICES naming the GPU UUIDs of its own host. This
proves the settings the template generates work; it is not skipped for want of torch
(the `test` extra installs torch==2.13.0, the CPU build here).

The tasks run as the user running the tests (root under `make test`; sshd allows root key
logins): the venv's python and torchrun are called by absolute path, and test users could
not read a venv under /root.
"""

from __future__ import annotations

import asyncio
import json
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.model.jobs import Job, TaskState
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.ports import free_port
from jupyter_gpuhive.sim.sshd import SshdCluster
from jupyter_gpuhive.sim.users import current_user
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs

pytestmark = [
    pytest.mark.skipif(shutil.which("screen") is None, reason="needs GNU screen"),
    pytest.mark.skipif(
        shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None,
        reason="needs OpenSSH sshd",
    ),
]

HOSTS = ("ddp1", "ddp2")
GPUS_PER_HOST = 2
WORLD = len(HOSTS) * GPUS_PER_HOST
EXPECTED_SUM = float(sum(range(1, WORLD + 1)))  # 1+2+3+4 = 10
RUN_TIMEOUT = 90.0
PYTHON = sys.executable  # the venv's python, by absolute path
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))

# All-reduces rank + 1 over gloo and prints one line "DDP {json}" with what it saw.
WORKER = """\
import datetime, json, os, socket, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
value = torch.tensor([rank + 1.0])
dist.all_reduce(value)
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR",
        "MASTER_PORT", "GPUHIVE_SIM_HOST")
print("DDP " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(),
                           "sum": value.item(), "env": {k: os.environ.get(k) for k in keys}}),
      flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[SshdCluster]:
    """Two real sshd hosts on loopback with 2 simulated GPUs each."""
    configs = {}
    for name in HOSTS:
        config = preset("a100x4", name)
        config.gpus = config.gpus[:GPUS_PER_HOST]
        configs[name] = config
    with SshdCluster(list(HOSTS), configs=configs) as started:
        yield started


@pytest.fixture
def worker() -> Iterator[str]:
    """The worker script in a directory every user can read (tmp_path is private)."""
    directory = Path(tempfile.mkdtemp(prefix="gpuhive-ddp-"))
    directory.chmod(0o755)
    path = directory / "ddp_worker.py"
    path.write_text(WORKER)
    path.chmod(0o644)
    yield str(path)
    shutil.rmtree(directory, ignore_errors=True)


def slots(cluster: SshdCluster) -> list[tuple[str, str, list[GpuSlot]]]:
    """Every GPU of both hosts, hosts in order (the first is the master)."""
    out = []
    for name in HOSTS:
        host = cluster[name]
        gpus = cluster.host_config(name).gpus
        out.append(
            (name, host.address, [GpuSlot(name, host.address, g.index, g.uuid) for g in gpus])
        )
    return out


def reports(text: str) -> list[dict[str, Any]]:
    """Every `DDP {...}` report in a log; ranks sharing a log may write on one line."""
    decoder, found, at = json.JSONDecoder(), [], text.find("DDP {")
    while at != -1:
        value, end = decoder.raw_decode(text, at + 4)
        found.append(value)
        at = text.find("DDP {", end)
    return found


def quit_sessions(job_name: str) -> None:
    """Last resort after a failure: quit our leftover screen sessions (the launcher stopped them)."""
    out = subprocess.run(["screen", "-ls"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("\t") and "." in line.split()[0]:
            name = line.split()[0].split(".", 1)[1]
            if name.startswith("gpuhive-") and f"-{job_name}-" in name:
                subprocess.run(["screen", "-S", name, "-X", "quit"], check=False)


def run_job(
    cluster: SshdCluster, spec: Job, extra: dict[str, Any] | None = None
) -> tuple[Job, dict[int, str], float]:
    """Store, start and follow the job to the end; its final state, each task's log, seconds
    (`extra`: more settings of every host, e.g. its container engine)."""
    owner = spec.owner
    log_dir = f".gpuhive/test-ddp-{uuid.uuid4().hex[:8]}"

    async def scenario(jobs: Jobs) -> tuple[Job, dict[int, str], float]:
        decls = [
            HostDecl(name, cluster[name].address, port=cluster[name].port, extra=extra or {})
            for name in HOSTS
        ]
        settings = SshSettings(
            client_keys=[str(cluster.client_key)],
            known_hosts=[str(cluster.known_hosts)],
            command_timeout=30,
        )
        pool = HostPool(decls, settings)
        launcher = Launcher(pool, jobs, grace=10.0)
        created = await asyncio.to_thread(jobs.create, spec, render_tasks(spec, slots(cluster)))
        began = time.monotonic()
        try:
            report = await launcher.start(created)
            assert report.ok, report.message
            job = report.job
            while time.monotonic() - began < RUN_TIMEOUT:
                await launcher.sync()
                job = await asyncio.to_thread(jobs.get, created.id)
                if not any(t.active for t in job.tasks):
                    break
                await asyncio.sleep(0.25)
            elapsed = time.monotonic() - began
            logs = {t.index: (await launcher.log(t)).text for t in job.tasks}
            if any(t.active for t in job.tasks):
                # SIGINT first (torchrun passes it on to its workers; never SIGKILL it).
                await launcher.stop(created.id)
            return job, logs, elapsed
        finally:
            await pool.close()

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/hive.sqlite").open()
        try:
            return asyncio.run(asyncio.wait_for(scenario(Jobs(store.db, f"~/{log_dir}")), 150))
        finally:
            store.close()
            quit_sessions(spec.name)
            shutil.rmtree(Path(pwd.getpwnam(owner).pw_dir) / log_dir, ignore_errors=True)


def check_run(job: Job, logs: dict[int, str]) -> list[dict[str, Any]]:
    """Every task succeeded and every rank reported the full sum; the reports by rank."""
    shown = "\n".join(f"--- task {i} ---\n{text[-3000:]}" for i, text in sorted(logs.items()))
    states = [(t.index, t.host, str(t.state), t.exit_status, t.last_error) for t in job.tasks]
    assert all(t.state == TaskState.SUCCEEDED for t in job.tasks), f"{states}\n{shown}"
    found = sorted((r for text in logs.values() for r in reports(text)), key=lambda r: r["rank"])
    assert [r["rank"] for r in found] == list(range(WORLD)), shown
    for report in found:
        assert report["sum"] == EXPECTED_SUM, report
        assert report["world"] == WORLD, report
        assert report["env"]["WORLD_SIZE"] == str(WORLD), report
        assert report["env"]["RANK"] == str(report["rank"]), report
    return found


def test_ddp_proof_torchrun_two_nodes_two_processes_each(cluster: SshdCluster, worker: str):
    import torch.distributed  # required, never skipped: the `test` extra installs it

    assert torch.distributed.is_available() and torch.distributed.is_gloo_available()
    port = free_port()
    spec = Job(
        name=f"ddp-run-{uuid.uuid4().hex[:6]}",
        owner=current_user(),
        command=worker,  # torchrun starts it with its own interpreter (the venv's)
        template="pytorch",
        options={"mode": "torchrun", "master_port": port, "torchrun": TORCHRUN},
        env={"GLOO_SOCKET_IFNAME": "lo"},
    )
    job, logs, elapsed = run_job(cluster, spec)
    print(f"torchrun mode: {elapsed:.1f} s from start to all tasks succeeded")
    assert [(t.index, t.host, t.role) for t in job.tasks] == [
        (0, "ddp1", "node"),
        (1, "ddp2", "node"),
    ]
    found = check_run(job, logs)
    uuids = {name: [g.uuid for g in cluster.host_config(name).gpus] for name in HOSTS}
    for task in job.tasks:
        # The launch line the template generated: only --node-rank differs per node.
        assert task.command == (
            f"{TORCHRUN} --nnodes 2 --nproc-per-node 2 --node-rank {task.index} "
            f"--master-addr 127.0.0.1 --master-port {port} {worker}"
        )
        ranks = reports(logs[task.index])
        # Node R runs global ranks R*2 and R*2+1, local ranks 0 and 1, on its own host.
        assert sorted((r["rank"], r["env"]["LOCAL_RANK"]) for r in ranks) == [
            (task.index * GPUS_PER_HOST + local, str(local)) for local in range(GPUS_PER_HOST)
        ]
        for report in ranks:
            assert report["env"]["GPUHIVE_SIM_HOST"] == task.host
            # torchrun's workers see all GPUs of their node, by UUID.
            assert report["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(uuids[task.host])
            assert report["env"]["MASTER_PORT"] == str(port)
    assert len(found) == WORLD


def test_ddp_proof_env_mode_one_task_per_gpu(cluster: SshdCluster, worker: str):
    port = free_port()
    spec = Job(
        name=f"ddp-env-{uuid.uuid4().hex[:6]}",
        owner=current_user(),
        command=f"{PYTHON} {{script}}",
        template="pytorch",
        options={"mode": "env", "master_port": port},
        variables={"script": worker},
        env={"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
    )
    job, logs, elapsed = run_job(cluster, spec)
    print(f"env mode: {elapsed:.1f} s from start to all tasks succeeded")
    assert [(t.index, t.host, t.role) for t in job.tasks] == [
        (0, "ddp1", "rank"),
        (1, "ddp1", "rank"),
        (2, "ddp2", "rank"),
        (3, "ddp2", "rank"),
    ]
    check_run(job, logs)
    for task in job.tasks:
        [report] = reports(logs[task.index])
        local = task.index % GPUS_PER_HOST
        gpu = cluster.host_config(task.host).gpus[local]
        assert report["rank"] == task.index
        assert report["env"]["LOCAL_RANK"] == str(local)
        assert report["env"]["GPUHIVE_SIM_HOST"] == task.host
        # Each process sees only its own GPU (gpu_visibility=task), by UUID.
        assert report["env"]["CUDA_VISIBLE_DEVICES"] == gpu.uuid
        assert task.gpus == (gpu.uuid,)
        assert report["env"]["MASTER_ADDR"] == "127.0.0.1"
        assert report["env"]["MASTER_PORT"] == str(port)
