"""A count-only job in Slurm's queue (jobs/slurm.py) on a real store: its one task has no GPUs
until Slurm runs it; then the node and GPU IDXs Slurm gave the job gpuhive submitted are
recorded on it, once; another job's, an unknown node or an unknown index are not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_gpuhive.jobs.slurm import engine_refusal, handover, place
from jupyter_gpuhive.model import GpuDecl, HostDecl
from jupyter_gpuhive.model.jobs import Job, TaskState
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import TaskChange

N1 = HostDecl("n1", address="n1.cluster", transport="slurm",
              gpus=tuple(GpuDecl(i, f"GPU-n1-{i}") for i in range(4)))  # fmt: skip
HOSTS = {"n1": N1}


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url).open()
    opened.inventory.sync([N1])
    yield opened
    opened.close()


async def direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


async def test_slurms_placement_is_recorded_only_for_the_submitted_job(store: Store) -> None:
    job = Job(name="counted", owner="alice", command="hostname", queued=True,
              options={"gpu_count": 2, "engine": "slurm"})  # fmt: skip
    assert engine_refusal(job, 2, HOSTS, store.inventory.gpus()) is None
    made = store.jobs.create(job, handover(job, HOSTS))
    (task,) = made.tasks
    assert (task.host, task.gpus, task.gpu_indices) == ("n1", (), ())
    store.jobs.change_tasks([TaskChange(task.id, TaskState.RUNNING, handle=7)])
    (task,) = store.jobs.get(made.id).tasks

    async def placed(job_id: int, *where: tuple[str, int]) -> bool:
        return await place(store, direct, lambda: HOSTS, task, (job_id, tuple(where)))

    assert not await placed(8, ("n1", 0), ("n1", 2))  # another job of that name
    assert not await placed(7, ("n9", 0))  # a node gpuhive does not list
    assert not await placed(7, ("n1", 0), ("n1", 5))  # an index n1 does not have
    assert store.jobs.get(made.id).tasks[0].gpus == ()
    assert await placed(7, ("n1", 0), ("n1", 2))
    (now,) = store.jobs.get(made.id).tasks
    assert (now.host, now.gpus, now.gpu_indices) == ("n1", ("GPU-n1-0", "GPU-n1-2"), (0, 2))
    assert not await placed(7, ("n1", 1), ("n1", 3))  # once only


def test_more_gpus_than_a_node_has_is_refused_in_words(store: Store) -> None:
    job = Job(name="big", owner="alice", command="true", queued=True,
              options={"gpu_count": 5, "engine": "slurm"})  # fmt: skip
    said = engine_refusal(job, 5, HOSTS, store.inventory.gpus())
    assert said == (
        "The job wants 5 GPUs on one slurm node, but the largest node has 4. Ask for at most 4."
    )
