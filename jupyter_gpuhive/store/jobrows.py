"""Rows of the jobs and job_tasks tables, to and from the model's Job and Task."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from ..model.containers import ContainerSpec
from ..model.jobs import Job, JobEvent, Task, TaskState
from .schema import job_tasks, jobs

# The column of a task's runner handle (`Task.handle`): named `screen_pid` from before the task
# runner seam; the name stays (no migration), the store maps it.
HANDLE_COLUMN = "screen_pid"


def task_query() -> Any:
    """Tasks with their job's owner, by job and index."""
    return (
        select(job_tasks, jobs.c.owner, jobs.c.container)
        .join(jobs, jobs.c.id == job_tasks.c.job_id)
        .order_by(job_tasks.c.job_id, job_tasks.c.idx)
    )


def seconds(walltime: timedelta | None) -> int | None:
    """A walltime as whole seconds (at least 1), None for none."""
    return None if walltime is None else max(1, round(walltime.total_seconds()))


def job_values(job: Job) -> dict[str, Any]:
    """The jobs row of a new job (without attempts and times)."""
    return {
        "name": job.name,
        "owner": job.owner,
        "description": job.description,
        "template": job.template,
        "command": job.command,
        "options": json.dumps(job.options, sort_keys=True),
        "variables": json.dumps(job.variables, sort_keys=True),
        "sweep": json.dumps(job.sweep),
        "env": json.dumps(job.env, sort_keys=True),
        "workdir": job.workdir,
        "queued": job.queued,
        "walltime_s": seconds(job.walltime),
        "start_at": job.start_at,
        "stop_at": job.stop_at,
        "max_retries": job.max_retries,
        "container": job.container.dumps() if job.container else None,
        "preemptible": job.preemptible,
        "preempt_signal": job.preempt_signal,
        "grace_s": job.grace_s,
        "restarts": 0,
    }


def job_of(
    row: Any,
    tasks: Sequence[Task],
    history: Sequence[JobEvent] = (),
    lent_from: int | None = None,
) -> Job:
    """The Job of a jobs row, its tasks, history and the reservation it runs on now."""
    return Job(
        id=row.id,
        name=row.name,
        owner=row.owner,
        description=row.description,
        template=row.template,
        command=row.command,
        options=json.loads(row.options),
        variables=json.loads(row.variables),
        sweep=json.loads(row.sweep),
        env=json.loads(row.env),
        workdir=row.workdir,
        queued=bool(row.queued),
        walltime=timedelta(seconds=row.walltime_s) if row.walltime_s is not None else None,
        start_at=row.start_at,
        stop_at=row.stop_at,
        max_retries=row.max_retries,
        container=ContainerSpec.loads(row.container),
        attempts=row.attempts,
        preemptible=bool(row.preemptible),
        preempt_signal=row.preempt_signal,
        grace_s=row.grace_s,
        restarts=row.restarts,
        lent_from=lent_from,
        history=tuple(history),
        created_at=row.created_at,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
        tasks=tuple(tasks),
    )


def task_of(row: Any) -> Task:
    """The Task of a row of `task_query`."""
    return Task(
        id=row.id,
        job_id=row.job_id,
        index=row.idx,
        owner=row.owner,
        host=row.host,
        address=row.address,
        role=row.role,
        gpus=tuple(json.loads(row.gpus)),
        gpu_indices=tuple(json.loads(row.gpu_indices)),
        command=row.command,
        env=json.loads(row.env),
        workdir=row.workdir,
        variables=json.loads(row.variables),
        session=row.session,
        log_path=row.log_path,
        exit_path=row.exit_path,
        state=TaskState(row.state),
        exit_status=row.exit_status,
        handle=row._mapping[HANDLE_COLUMN],
        pgid=row.pgid,
        started_at=row.started_at,
        ended_at=row.ended_at,
        last_error=row.last_error,
        container=ContainerSpec.loads(row.container),
    )


def pending_values(note: str | None) -> dict[str, Any]:
    """Task columns of a task put back to pending (nothing of its last run kept)."""
    return {
        "state": str(TaskState.PENDING),
        "exit_status": None,
        HANDLE_COLUMN: None,
        "pgid": None,
        "started_at": None,
        "ended_at": None,
        "last_error": note,
    }
