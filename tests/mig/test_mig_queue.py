"""The queue and MIG slices: another user's process on a slice keeps queued jobs off it."""

from __future__ import annotations

from datetime import UTC, datetime

from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.jobs.queue import gpu_states
from jupyter_gpuhive.model import Gpu
from jupyter_gpuhive.model.jobs import Job, Task, TaskState
from jupyter_gpuhive.monitor.sampler import Sweep

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def _slice(unit_id: int, gi: int, uuid: str) -> Gpu:
    return Gpu(unit_id, "h", 0, uuid, "A100", 9984, parent_id=1, profile="1g.10gb",
               gpu_instance_id=gi, compute_instance_id=0)  # fmt: skip


def _running_on(job_id: int, owner: str, uuid: str, pgid: int) -> Job:
    task = Task(
        id=job_id * 10, job_id=job_id, index=0, owner=owner, host="h", address="x", role="task",
        gpus=(uuid,), gpu_indices=(0,), command="c", env={}, workdir=None, variables={},
        session="s", log_path="l", exit_path="e", state=TaskState.RUNNING, pgid=pgid,
        started_at=NOW,
    )  # fmt: skip
    return Job(name=f"j{job_id}", owner=owner, command="c", id=job_id, tasks=(task,),
               created_at=NOW, queued=True)  # fmt: skip


def test_a_process_of_someone_else_on_a_slice_keeps_queued_jobs_off_that_slice_only() -> None:
    units = [Gpu(1, "h", 0, "GPU-0", "A100", 81920), _slice(2, 1, "MIG-a"), _slice(3, 2, "MIG-b"),
             _slice(4, 3, "MIG-c")]  # fmt: skip
    procs = (
        ProcessInfo(501, "GPU-0", "ann", "python", 10, 500, mig_uuid="MIG-a"),  # ann's job's own
        ProcessInfo(600, "GPU-0", "eve", "python", 10, 600, mig_uuid="MIG-b"),  # someone else's
    )
    sweep = Sweep(NOW, 5.0, {"h": HostSample("h", NOW, processes=procs)}, {})
    states = gpu_states(units, {}, [_running_on(1, "ann", "MIG-a", 500)], sweep, NOW)
    assert states["MIG-a"].blocker == "h:0/mig1 runs job 1"
    assert states["MIG-b"].blocker == "h:0/mig2 runs process 600 of eve"  # None before
    assert states["MIG-c"].blocker is None  # the neighbouring slice stays free
    assert states["GPU-0"].blocker is not None  # the whole GPU is busy, as before
    # Without process groups (an older probe) the job's owner on its slice is recognised.
    bare = tuple(ProcessInfo(p.pid, p.gpu_uuid, p.user, p.command, 1, mig_uuid=p.mig_uuid)
                 for p in procs)  # fmt: skip
    sweep2 = Sweep(NOW, 5.0, {"h": HostSample("h", NOW, processes=bare)}, {})
    states2 = gpu_states(units, {}, [_running_on(1, "ann", "MIG-a", 500)], sweep2, NOW)
    assert states2["MIG-a"].blocker == "h:0/mig1 runs job 1"
    assert states2["MIG-b"].blocker == "h:0/mig2 runs process 600 of eve"
