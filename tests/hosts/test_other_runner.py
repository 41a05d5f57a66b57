"""The task runner seam is real: a runner written only against `hosts.runners` (no GNU screen:
tests/support/otherrunner.py, `setsid` and a pid file), brought by a backend registered at run
time, starts a job's task as its owner on the simulated GPUs, syncs it, stops it, and reads
the exit status of a task that ended by itself and of one killed outside gpuhive."""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts import backends
from jupyter_gpuhive.model.jobs import Task, TaskState
from jupyter_gpuhive.sim.users import is_root
from tests.hosts.test_other_backend import hive_over
from tests.jobs.test_jobs_launcher import (  # noqa: F401 - the owner fixture
    PROBE,
    Hive,
    alive,
    first_json,
    job,
    owner,
    sessions,
    user_of,
)
from tests.support.otherrunner import NAME, SetsidBackend, SetsidRunner
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(not is_root(), reason="runs commands as another user")


@pytest.fixture
def runner_hive(
    owner: pwd.struct_passwd,  # noqa: F811 - the imported fixture
    tmp_path: Path,
    jp_asyncio_loop: Any,
) -> Iterator[Hive]:
    backends.register(NAME, SetsidBackend)
    yield from hive_over(NAME, "sr1", Path(owner.pw_dir), tmp_path, jp_asyncio_loop)
    backends.unregister(NAME)


async def _state(hive: Hive, task: Task, *states: TaskState) -> Task | None:
    await hive.launcher.sync()
    now = (await _job(hive, task.job_id)).tasks[task.index]
    return now if now.state in states else None


async def _job(hive: Hive, job_id: int) -> Any:
    return await asyncio.to_thread(hive.jobs.get, job_id)


async def test_the_backend_brings_its_runner(runner_hive: Hive) -> None:
    decl = runner_hive.pool.hosts["sr1"]
    assert isinstance(runner_hive.pool.backend("sr1").runner(decl), SetsidRunner)


async def test_a_job_runs_stops_and_ends_through_the_other_runner(
    runner_hive: Hive,
    owner: pwd.struct_passwd,  # noqa: F811 - the imported fixture
) -> None:
    hive = runner_hive
    spec = job("python3 -c {probe}", variables={"probe": PROBE})
    created = await hive.create(spec, hive.slots("sr1", 1, 3))
    report = await hive.launcher.start(created)
    assert report.ok, report.message
    task = report.job.tasks[0]
    assert task.state == TaskState.RUNNING and task.handle is not None

    async def said() -> bool:
        return "{" in (await hive.launcher.log(task)).text

    await until(said)
    seen = first_json((await hive.launcher.log(task)).text)
    assert user_of(seen["pid"]) == owner.pw_name
    assert seen["pgid"] == task.handle == task.pgid  # its own session, the runner's handle
    uuids = [hive.hosts["sr1"].config.gpus[i].uuid for i in (1, 3)]
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(uuids)
    assert not [s for s in sessions() if s == task.session]  # no screen involved
    synced = await hive.launcher.sync()
    assert synced.unreachable == {} and synced.changed == ()  # still running: no change
    assert hive.launcher.attach_hint(task).startswith("tail -f -- ")

    stopped = await hive.launcher.stop(created)
    assert stopped.failures == {}
    [done] = stopped.job.tasks
    assert (done.state, done.exit_status) == (TaskState.STOPPED, 130)  # SIGINT, then exit 130
    assert "got SIGINT" in (await hive.launcher.log(task)).text
    assert not alive(seen["pid"])


async def test_sync_reads_exit_statuses_and_lost_runs(runner_hive: Hive) -> None:
    hive = runner_hive
    failing = await hive.create(job("sleep 1; exit 3"), hive.slots("sr1", 0))
    sleeper = await hive.create(job("exec sleep 300"), hive.slots("sr1", 2))
    for made in (failing, sleeper):
        assert (await hive.launcher.start(made)).ok
    first = (await _job(hive, failing.id)).tasks[0]
    ended = await until(lambda: _state(hive, first, TaskState.FAILED))
    assert ended.exit_status == 3

    victim = (await _job(hive, sleeper.id)).tasks[0]
    assert victim.state == TaskState.RUNNING and victim.handle is not None
    os.killpg(victim.handle, signal.SIGKILL)  # outside gpuhive: no exit file is written
    lost = await until(lambda: _state(hive, victim, TaskState.LOST))
    assert lost.exit_status is None
    assert lost.last_error is not None
    assert lost.last_error.startswith(f"setsid run {victim.session} ended without an exit status")
