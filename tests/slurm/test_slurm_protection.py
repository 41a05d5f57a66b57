"""Monitoring and protection on a real Slurm node that gpuhive reaches itself (issue #47,
item 5): the vendor probe's processes land on the GPUs Slurm names by IDX; a GPU process
inside a Slurm job (Slurm confines it) is reported and left alone; one outside any job is a
violation with the usual handlers, even when it calls itself a Slurm step and carries
SLURM_JOB_ID in its environment (the hostile user, gh-bob, a real UNIX user)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts.backends.slurm import slurm_uuid
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.protection.service import ProtectionSettings
from jupyter_gpuhive.sim.cluster import LocalSimHost
from tests.protection.conftest import SIM_ENV, make_rig, store  # noqa: F401 - the fixtures
from tests.slurm.conftest import ACCOUNTS
from tests.support.pids import alive
from tests.support.slurm import SlurmCluster
from tests.support.waiting import until

BOB = ACCOUNTS["bob"]
SLEEPER = "import time; time.sleep(300)"


@pytest.fixture
def started(slurm: SlurmCluster) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes the test starts, ended afterwards (and bob's jobs cancelled)."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:  # each in a session of its own: its group is it and its children
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    subprocess.run([f"{slurm.bin}/scancel", "-u", BOB], env=slurm.env, check=False,
                   capture_output=True, timeout=30)  # fmt: skip


def as_bob(*argv: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["runuser", "-u", BOB, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, cwd="/",
    )  # fmt: skip


async def test_in_job_gpu_use_is_reported_and_out_of_job_use_is_stopped(
    slurm: SlurmCluster,
    make_rig: Any,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    started: list[Any],
) -> None:
    sim = LocalSimHost("n2", tmp_path / "sim")
    sim_env = sim.env()
    decl = HostDecl("n2", transport="slurm", extra={
        "slurm": {"node": "n2", "conf": str(slurm.conf), "bin": slurm.bin, "probe": "local"},
        "env": {k: sim_env[k] for k in SIM_ENV},
    })  # fmt: skip
    settings = ProtectionSettings(
        level=2, user_map=ACCOUNTS, handlers={"kill": {"mode": "user"}},
        ladder=[{"after": 0, "handler": "kill", "signal": "KILL"}],
    )  # fmt: skip
    rig = make_rig([decl], settings)
    first = await rig.sweep()
    gpus = first.samples["n2"].gpus
    assert [g.uuid for g in gpus] == [slurm_uuid("n2", "n2", i) for i in range(4)]
    assert gpus[0].mem_total_mib is not None  # the vendor probe's readings, on Slurm's GPUs

    # bob's own Slurm job on n2 (no booking: an unreserved GPU at level 2), one GPU
    client = {**slurm.env, "GPUHIVE_SIM_HOST": "n2"}
    started.append(as_bob("srun", "--nodelist=n2", "--nodes=1", "--ntasks=1", "--gres=gpu:1",
                          "--job-name=bobs", "python3", "-c", SLEEPER, env=client))  # fmt: skip

    def job() -> str | None:
        out = subprocess.run([f"{slurm.bin}/squeue", "-h", "-u", BOB, "-t", "R", "-o", "%i"],
                             env=slurm.env, capture_output=True, text=True, timeout=30)  # fmt: skip
        return out.stdout.strip() or None

    job_id = await until(job, 30, "bob's Slurm job running")
    # ... and a process of his outside any job ("an SSH login") that dresses as a step: a
    # slurmstepd name, SLURM_JOB_ID and SLURM_STEP_ID of his real job, on GPU 1
    hostile = {"PATH": "/usr/bin:/bin", "GPUHIVE_SIM_HOST": "n2", "CUDA_VISIBLE_DEVICES": "1",
               "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_STEP_ID": "0"}  # fmt: skip
    outside = as_bob("bash", "-c", f'exec -a "slurmstepd: [{job_id}.0]" python3 -c "{SLEEPER}"',
                     env=hostile)  # fmt: skip
    started.append(outside)

    async def both() -> dict[str, Any] | None:
        sweep = await rig.sweep()
        procs = {p.gpu_uuid: p for p in sweep.samples["n2"].processes if p.user == BOB}
        return procs if len(procs) == 2 else None

    procs = await until(both, 30, "both of bob's GPU processes seen")
    in_job, out_of_job = procs[gpus[0].uuid], procs[gpus[1].uuid]
    assert in_job.confined_by == f"Slurm job {job_id}"  # slurmstepd's own list says so
    assert out_of_job.confined_by is None  # its name and environment count for nothing
    assert out_of_job.pgid == outside.pid and out_of_job.command.startswith("slurmstepd:")

    def acted() -> dict[str, Any] | None:
        found = {v.gpu_uuid: v for v in rig.history() if v.offender == BOB and v.actions}
        return found if len(found) == 2 else None

    async def recorded() -> dict[str, Any] | None:
        await rig.sweep()
        return acted()

    found = await until(recorded, 30, "both violations acted on")
    reported, stopped = found[gpus[0].uuid], found[gpus[1].uuid]
    assert reported.kind == stopped.kind == "unreserved"
    assert f"inside Slurm job {job_id}" in (reported.detail or "")
    (action,) = reported.actions
    assert (action.handler, action.outcome) == ("kill", "ok"), action
    assert f"pid {in_job.pid} runs inside Slurm job {job_id}" in action.detail
    assert "reported only" in action.detail
    assert alive(in_job.pid)  # Slurm confines it: gpuhive stopped nothing
    (action,) = stopped.actions
    assert (action.handler, action.outcome) == ("kill", "ok"), action
    assert "SIGKILL sent to" in action.detail and str(out_of_job.pid) in action.detail, action
    await until(lambda: not alive(out_of_job.pid), 10, "the out-of-job process killed")
    assert job() == job_id  # bob's real job runs on
