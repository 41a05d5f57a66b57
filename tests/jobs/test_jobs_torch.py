"""A real gloo all-reduce on localhost from pytorch template tasks (no launcher, no sshd).

The end-to-end proof through sshd hosts and the launcher, in both modes, is test_jobs_ddp.py;
this one covers what it does not: nodes with unequal GPU counts (rank offsets per node).
torch is required, never skipped: the `test` extra installs torch==2.13.0.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuhive.jobs import GpuSlot, get_template, shell_command
from jupyter_gpuhive.sim.ports import free_port

WORKER = """\
import datetime, json, os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
value = torch.tensor([float(dist.get_rank())])
dist.all_reduce(value)
print(json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(),
                  "local": int(os.environ["LOCAL_RANK"]), "sum": value.item()}), flush=True)
dist.destroy_process_group()
"""


def local_hosts(*counts: int):
    return [
        (
            f"node{n}",
            "127.0.0.1",
            [GpuSlot(f"node{n}", "127.0.0.1", i, f"GPU-{n}-{i}") for i in range(c)],
        )
        for n, c in enumerate(counts)
    ]


def run_all(tasks, tmp_path: Path) -> list[dict]:
    procs = [
        subprocess.Popen(
            ["bash", "-c", shell_command(task)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in tasks
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    return results


@pytest.fixture
def worker(tmp_path: Path) -> str:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return str(path)


def test_env_mode_ranks_with_unequal_gpu_counts_work_in_torch(worker, tmp_path):
    tasks = get_template("pytorch").render(
        "torch-env",
        f"{shlex.quote(sys.executable)} {shlex.quote(worker)}",
        local_hosts(3, 1),
        options={"mode": "env", "master_port": free_port()},
        env={"GLOO_SOCKET_IFNAME": "lo"},
    )
    results = run_all(tasks, tmp_path)
    assert sorted((r["rank"], r["local"]) for r in results) == [(0, 0), (1, 1), (2, 2), (3, 0)]
    assert {r["world"] for r in results} == {4}
    assert {r["sum"] for r in results} == {6.0}
