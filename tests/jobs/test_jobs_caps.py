"""A share job's memory caps: rendered into its tasks, and in force in the real process.

The real job runs as a test user in a screen session on a simulated host; its environment is
read from /proc/<pid>/environ as the system sees it, and the real PyTorch it imports shows
gpuhive's start-up queued its per-process memory fraction for when CUDA starts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.vendors import vendor_named
from jupyter_gpuhive.jobs import caps
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.jobs.tasks import GpuSlot, TemplateError
from jupyter_gpuhive.model.jobs import Job
from tests.jobs.test_jobs_launcher import OWNER, Hive, first_json, job, user_of
from tests.jobs.test_jobs_launcher import hive as hive
from tests.jobs.test_jobs_launcher import owner as owner
from tests.jobs.test_jobs_launcher import shared_dir as shared_dir
from tests.support.kernel_python import kernel_python
from tests.support.waiting import until

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
SLOT = ("h1", "10.0.0.1", [GpuSlot("h1", "10.0.0.1", 0, UUID)])

# What a program on the share sees: gpuhive's start-up and PyTorch's queued calls.
PROBE = """\
import json, os, sys, time
import torch
queued = [getattr(call[0], "__qualname__", "") for call in torch.cuda._queued_calls]
print(json.dumps({"pid": os.getpid(), "site": sys.modules["sitecustomize"].__file__,
                  "queued": queued}), flush=True)
time.sleep(60)
"""


def share_job(**options: object) -> Job:
    return Job(name="s", owner="ann", command="python train.py", template="pytorch",
               options={"mode": "env", **options})  # fmt: skip


def test_a_share_jobs_task_gets_every_framework_cap() -> None:
    [task] = render_tasks(share_job(memory="20G"), [SLOT], gpu_memory={UUID: 81920})
    env = task.env
    assert env["GPUHIVE_SHARE"] == env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.25"
    assert env["GPUHIVE_SHARE_MIB"] == "20480"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "per_process_memory_fraction:0.25"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env  # the host runs no MPS
    assert env["GPUHIVE_CAPS_SOURCE"] == caps.packed_start()
    assert task.command.endswith("exec bash -c 'python train.py'")
    assert "sitecustomize.py" in task.command


def test_mps_hosts_cap_by_mps_and_the_users_allocator_settings_are_kept() -> None:
    job = Job(name="s", owner="ann", command="python train.py", template="pytorch",
              options={"mode": "env", "memory": "10G"},
              env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})  # fmt: skip
    [task] = render_tasks(job, [SLOT], gpu_memory={UUID: 40960}, mps={"h1"})
    assert task.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{UUID}=10240M"
    assert task.env["PYTORCH_CUDA_ALLOC_CONF"] == (
        "expandable_segments:True,per_process_memory_fraction:0.25"
    )


def test_amd_hosts_cap_through_hips_allocator_and_have_no_mps() -> None:
    pins = {"h1": vendor_named("amd").pinning}
    [task] = render_tasks(share_job(memory="16G"), [SLOT], pinnings=pins, mps={"h1"},
                          gpu_memory={UUID: 65536})  # fmt: skip
    assert task.env["PYTORCH_HIP_ALLOC_CONF"] == "per_process_memory_fraction:0.25"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in task.env
    assert "PYTORCH_CUDA_ALLOC_CONF" not in task.env


def test_whole_gpu_jobs_are_not_capped_and_bad_shares_are_refused() -> None:
    [task] = render_tasks(share_job(), [SLOT])
    assert not any(name.startswith("GPUHIVE_SHARE") for name in task.env)
    assert "sitecustomize" not in task.command
    two = ("h1", "10.0.0.1", [*SLOT[2], GpuSlot("h1", "10.0.0.1", 1, UUID + "x")])
    with pytest.raises(TemplateError, match="share of one GPU, but the job has 2 GPUs"):
        render_tasks(share_job(memory="8G"), [two])
    with pytest.raises(TemplateError, match="more than the GPU's 40960 MiB"):
        render_tasks(share_job(memory="50G"), [SLOT], gpu_memory={UUID: 40960})
    with pytest.raises(TemplateError, match="'memory' must be memory such as"):
        render_tasks(share_job(memory="lots"), [SLOT])
    # Memory of a GPU gpuhive does not know: the MiB caps, no fraction to guess.
    [task] = render_tasks(share_job(memory="8G"), [SLOT])
    assert task.env["GPUHIVE_SHARE_MIB"] == "8192" and "GPUHIVE_SHARE" not in task.env


async def test_a_real_share_job_runs_capped(hive: Hive) -> None:
    gpu = hive.hosts["jl1"].config.gpus[1]
    python = await asyncio.to_thread(kernel_python, ["torch"])  # one the test user may run
    spec = job(f"{python} -c {{probe}}", template="pytorch",
               options={"mode": "env", "master_port": 29566, "memory": "10G"},
               variables={"probe": PROBE})  # fmt: skip
    tasks = render_tasks(spec, [hive.slots("jl1", 1)], gpu_memory={gpu.uuid: gpu.memory_total_mib})
    created = await asyncio.to_thread(hive.jobs.create, spec, tasks)
    report = await hive.launcher.start(created)
    assert report.ok, report.message
    [task] = report.job.tasks

    async def printed() -> bool:
        text = (await hive.launcher.log(task)).text
        assert "Error" not in text, text
        return "{" in text

    await until(printed, timeout=60)  # PyTorch's import takes a while on a busy machine
    probe = first_json((await hive.launcher.log(task)).text)
    raw = Path(f"/proc/{probe['pid']}/environ").read_bytes().decode()  # noqa: ASYNC240
    env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
    share = f"{10240 / gpu.memory_total_mib:.4g}"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == env["GPUHIVE_SHARE"] == share
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == f"per_process_memory_fraction:{share}"
    assert env["GPUHIVE_SHARE_MIB"] == "10240"
    assert "GPUHIVE_CAPS_SOURCE" not in env  # unpacked, then dropped
    assert env["CUDA_VISIBLE_DEVICES"] == gpu.uuid
    # gpuhive's start-up ran from its private folder and queued PyTorch's cap.
    assert probe["site"].endswith("/sitecustomize.py") and "gpuhive-caps-" in probe["site"]
    assert "cap_torch.<locals>.apply" in probe["queued"]
    assert user_of(probe["pid"]) == OWNER
    await hive.launcher.stop(created.id)
