"""Jobs in the store (real SQLite and PostgreSQL): tasks, states by compare-and-set, deletion."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from jupyter_gpuhive.errors import Conflict, NotFound
from jupyter_gpuhive.jobs import GpuSlot, TemplateError
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.model import UTC
from jupyter_gpuhive.model.jobs import Job, TaskState, job_status, task_paths
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import TaskChange

S = TaskState
NASTY = 'it\'s "q" $(id) `id`\nline2 ☃'


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url).open()
    yield opened
    opened.close()


def slots(host: str, count: int, *, mig: bool = False) -> tuple[str, str, list[GpuSlot]]:
    kind = "MIG" if mig else "GPU"
    return (host, f"10.0.0.{host[-1]}", [
        GpuSlot(host, f"10.0.0.{host[-1]}", i, f"{kind}-{host}-{i}") for i in range(count)
    ])  # fmt: skip


def new_job(owner: str = "alice", **kwargs: object) -> Job:
    values: dict[str, object] = {"name": "train", "owner": owner, "command": "python t.py {lr}",
                                 "variables": {"lr": "0.1"}}  # fmt: skip
    values.update(kwargs)
    return Job(**values)  # type: ignore[arg-type]


def test_create_get_and_list_keep_every_field(store: Store) -> None:
    start = datetime(2030, 1, 1, 22, tzinfo=UTC)
    spec = new_job(
        description=NASTY,
        template="pytorch",
        command="train.py --note {note}",
        variables={"note": NASTY},
        options={"mode": "env", "master_port": 29600},
        env={"NOTE": NASTY},
        workdir="/data/it's here",
        queued=True,
        walltime=timedelta(hours=2),
        start_at=start,
        stop_at=start + timedelta(hours=3),
        max_retries=2,
    )
    job = store.jobs.create(spec, render_tasks(spec, [slots("gpu1", 2), slots("gpu2", 1)]))
    assert store.jobs.get(job.id) == job
    assert (job.name, job.owner, job.description, job.template) == (
        "train", "alice", NASTY, "pytorch"
    )  # fmt: skip
    assert (job.queued, job.walltime, job.start_at, job.max_retries, job.attempts) == (
        True, timedelta(hours=2), start, 2, 0
    )  # fmt: skip
    assert job.options == {"mode": "env", "master_port": 29600}
    assert job.status == "pending"
    assert job.gpus == ("GPU-gpu1-0", "GPU-gpu1-1", "GPU-gpu2-0")
    assert [t.index for t in job.tasks] == [0, 1, 2]
    task = job.tasks[2]
    assert (task.host, task.owner, task.gpus, task.gpu_indices) == (
        "gpu2", "alice", ("GPU-gpu2-0",), (0,)
    )  # fmt: skip
    assert task.env["NOTE"] == NASTY and task.env["RANK"] == "2"
    assert task.env["CUDA_VISIBLE_DEVICES"] == "GPU-gpu2-0"
    assert task.workdir == "/data/it's here"
    assert task.session == f"gpuhive-{job.id}-train-2"
    assert re.fullmatch(rf"~/\.gpuhive/jobs/{job.id}-[0-9a-f]{{6}}-2\.log", task.log_path)
    assert task.exit_path == task.log_path.removesuffix(".log") + ".exit"
    assert task.spec().visible_devices == "GPU-gpu2-0"
    assert job.to_json()["tasks"][2]["state"] == "pending"

    other = store.jobs.create(
        new_job("bob", queued=False), render_tasks(new_job(), [slots("gpu1", 1)])
    )
    assert [j.id for j in store.jobs.all()] == [job.id, other.id]
    assert [j.id for j in store.jobs.all(owner="bob")] == [other.id]
    assert [j.id for j in store.jobs.all(queued=True)] == [job.id]
    assert store.jobs.all(statuses={"running"}) == []
    with pytest.raises(NotFound):
        store.jobs.get(other.id + 100)


def test_task_states_change_only_from_the_expected_ones(store: Store) -> None:
    spec = new_job()
    job = store.jobs.create(spec, render_tasks(spec, [slots("gpu1", 1), slots("gpu2", 1)]))
    first, second = (t.id for t in job.tasks)
    claimed = store.jobs.change_tasks(
        [TaskChange(first, S.STARTING), TaskChange(second, S.STARTING)], {S.PENDING}
    )
    assert claimed == [first, second]
    # A second claim finds them taken: nothing changes.
    assert store.jobs.change_tasks([TaskChange(first, S.STARTING)], {S.PENDING}) == []
    store.jobs.change_tasks([TaskChange(first, S.RUNNING, handle=42, pgid=43)], {S.STARTING})
    assert store.jobs.get(job.id).status == "starting"
    store.jobs.change_tasks([TaskChange(second, S.RUNNING)], {S.STARTING})
    assert store.jobs.get(job.id).status == "running"
    assert [t.id for t in store.jobs.tasks({S.RUNNING})] == [first, second]
    with pytest.raises(Conflict, match="stop it first"):
        store.jobs.delete(job.id)
    with pytest.raises(Conflict):
        store.jobs.reset(job.id)

    store.jobs.change_tasks([TaskChange(first, S.FAILED, exit_status=3, last_error="x")])
    store.jobs.change_tasks([TaskChange(second, S.SUCCEEDED, exit_status=0)])
    done = store.jobs.get(job.id)
    assert done.status == "failed"
    assert (done.tasks[0].exit_status, done.tasks[0].handle, done.tasks[0].pgid) == (3, 42, 43)

    again = store.jobs.reset(job.id)
    assert again.status == "pending"
    assert all(t.exit_status is None and t.handle is None for t in again.tasks)
    store.jobs.delete(job.id)
    with pytest.raises(NotFound):
        store.jobs.get(job.id)
    assert store.jobs.tasks() == []


def test_update_edits_only_the_job_fields(sqlite_url: str) -> None:
    store = Store(sqlite_url).open()
    spec = new_job()
    job = store.jobs.create(spec, render_tasks(spec, [slots("gpu1", 1)]))
    changed = store.jobs.update(job.id, by="boss", queued=True, walltime=timedelta(minutes=30),
                                attempts=1)  # fmt: skip
    assert (changed.queued, changed.walltime, changed.attempts, changed.updated_by) == (
        True, timedelta(minutes=30), 1, "boss"
    )  # fmt: skip
    assert changed.tasks == job.tasks
    with pytest.raises(ValueError, match="owner"):
        store.jobs.update(job.id, owner="mallory")
    with pytest.raises(NotFound):
        store.jobs.update(job.id + 1, queued=False)
    store.close()


def test_status_is_derived_from_the_tasks() -> None:
    assert job_status([]) == "pending"
    assert job_status([S.PENDING, S.PENDING]) == "pending"
    assert job_status([S.RUNNING, S.SUCCEEDED]) == "running"
    assert job_status([S.RUNNING, S.STOPPING]) == "stopping"
    assert job_status([S.STARTING, S.RUNNING]) == "starting"
    assert job_status([S.SUCCEEDED, S.SUCCEEDED]) == "succeeded"
    assert job_status([S.SUCCEEDED, S.FAILED, S.STOPPED]) == "failed"
    assert job_status([S.LOST, S.STOPPED]) == "lost"
    assert job_status([S.STOPPED, S.SUCCEEDED]) == "stopped"
    assert job_status([S.PENDING, S.SUCCEEDED]) == "pending"


def test_sweeps_duplicate_tasks_and_paths_are_checked() -> None:
    spec = new_job(
        command="t.py --lr {lr} --bs {bs}",
        variables={},
        sweep={"lr": ["0.1", "0.01"], "bs": ["32"]},
    )
    tasks = render_tasks(spec, [slots("gpu1", 2, mig=True)])
    assert [t.index for t in tasks] == [0, 1]
    assert [t.command for t in tasks] == ["t.py --lr 0.1 --bs 32", "t.py --lr 0.01 --bs 32"]
    assert all(t.env["CUDA_VISIBLE_DEVICES"] == "MIG-gpu1-0,MIG-gpu1-1" for t in tasks)
    with pytest.raises(TemplateError, match="both a variable and a sweep"):
        render_tasks(new_job(sweep={"lr": ["1", "2"]}), [slots("gpu1", 1)])

    assert task_paths("/scratch/{user}/hive/", "alice", 7, 1) == (
        "/scratch/alice/hive/7-1.log", "/scratch/alice/hive/7-1.exit"
    )  # fmt: skip
    with pytest.raises(TemplateError, match="absolute"):
        task_paths("relative/dir", "alice", 7, 1)
