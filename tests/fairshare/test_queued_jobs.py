"""How queued jobs count against limits: waiting, nothing; running, their GPUs from their
start to their walltime (GPUs at once, GPU-hours); never as an upcoming reservation."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.bookings.limits import LimitExceeded
from jupyter_gpuhive.bookings.quotas import LimitService
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity, utcnow
from jupyter_gpuhive.model.jobs import GpuSlot, Job, TaskSpec, TaskState
from jupyter_gpuhive.model.limits import Limits, LimitTable
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import TaskChange

ALICE = Identity("alice")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    s.inventory.sync([HostDecl("h1", gpus=tuple(GpuDecl(i, f"GPU-h1-{i}") for i in range(4)))])
    yield s
    s.close()


def queued_job(store: Store, gpus: int, walltime: timedelta) -> int:
    """A queued job of alice on `gpus` GPUs of h1, waiting; its task id."""
    slots = tuple(GpuSlot("h1", "localhost", i, f"GPU-h1-{i}") for i in range(gpus))
    spec = TaskSpec(
        host="h1", address="localhost", gpus=slots, command="true", env={}, variables={}
    )
    job = store.jobs.create(Job("q", "alice", "true", queued=True, walltime=walltime), [spec])
    return job.tasks[0].id


def book(store: Store, limits: LimitService, start_in: timedelta, gpus: list[int]) -> None:
    start = utcnow() + start_in
    ids = [store.inventory.gpu(f"h1:{i}").id for i in gpus]  # type: ignore[union-attr]
    store.reservations.create("alice", "r", "", start, start + timedelta(hours=1), ids,
                              limits.guard(ALICE))  # fmt: skip


def test_a_running_queued_job_holds_its_gpus_until_its_walltime(store: Store) -> None:
    table = LimitTable(users={"alice": Limits(gpus=3, gpu_hours_week=10, upcoming=5)})
    limits = LimitService(store, ZoneInfo("UTC"), table, lambda name: Identity(name))
    task = queued_job(store, gpus=2, walltime=timedelta(hours=4))

    book(store, limits, timedelta(minutes=30), [2, 3])  # waiting in the queue: counts nothing
    assert limits.figures(ALICE)["current"] == {"gpus": 0, "gpu_hours_week": 2.0, "upcoming": 1}
    started = utcnow() - timedelta(hours=1)
    store.jobs.change_tasks([TaskChange(task, TaskState.RUNNING, started_at=started)])

    with pytest.raises(LimitExceeded) as caught:  # 2 (job) + 2 (booking) at once, limit 3
        book(store, limits, timedelta(hours=2), [2, 3])
    assert caught.value.details["limit"] == "gpus" and caught.value.details["current"] == 2
    # running: 2 GPUs now; 2 x 4 GPU-hours (from 1 h ago to its walltime) + 2; 1 upcoming
    assert limits.figures(ALICE)["current"] == {"gpus": 2, "gpu_hours_week": 10.0, "upcoming": 1}
    # after its walltime the job's GPUs are free again, but its GPU-hours still count
    with pytest.raises(LimitExceeded) as caught:
        book(store, limits, timedelta(hours=3, minutes=30), [2])
    assert caught.value.details["limit"] == "gpu_hours_week"
