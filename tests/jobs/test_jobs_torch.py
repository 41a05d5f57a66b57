"""A real gloo all-reduce on localhost from pytorch template tasks, where torch is installed."""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuhive.jobs import GpuSlot, get_template, shell_command

pytest.importorskip("torch")

WORKER = """\
import datetime, json, os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
value = torch.tensor([float(dist.get_rank())])
dist.all_reduce(value)
print(json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(),
                  "local": int(os.environ["LOCAL_RANK"]), "sum": value.item()}), flush=True)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


@pytest.mark.parametrize("counts", [(2, 2), (3, 1)])
def test_env_mode_ranks_work_in_torch(counts, worker, tmp_path):
    tasks = get_template("pytorch").render(
        "torch-env",
        f"{shlex.quote(sys.executable)} {shlex.quote(worker)}",
        local_hosts(*counts),
        options={"mode": "env", "master_port": free_port()},
        env={"GLOO_SOCKET_IFNAME": "lo"},
    )
    results = run_all(tasks, tmp_path)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert {r["world"] for r in results} == {4}
    assert {r["sum"] for r in results} == {6.0}


def test_torchrun_mode_works(worker, tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    tasks = get_template("pytorch").render(
        "torch-run",
        shlex.quote(worker),
        local_hosts(2, 2),
        options={"master_port": free_port(), "torchrun": torchrun},
        env={"GLOO_SOCKET_IFNAME": "lo"},
    )
    results = run_all(tasks, tmp_path)
    assert sorted((r["rank"], r["local"]) for r in results) == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert {r["sum"] for r in results} == {6.0}
