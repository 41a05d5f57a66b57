"""What a task's runner saw on its host, read as task changes (for the launcher).

`observe` turns what `sync` saw (the run still there or not, its exit file) into the change of
a task's state; `to_int` and `tail` are the runners' readers (`hosts/runners/`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..hosts.runners import tail, to_int
from ..model import utcnow
from ..model.jobs import Task, TaskState
from ..store.jobs import TaskChange

__all__ = ["apply_change", "observe", "tail", "to_int"]


def observe(
    task: Task,
    alive: bool,
    code: str | None,
    what: str = "run",
    *,
    waiting: bool = False,
    why: str | None = None,
) -> TaskChange | None:
    """The change that what `sync` saw on the host implies for one task (None: none): its
    run (`what`, in words: "screen session") still there or not, its exit file's text; a
    batch system's runner also says whether the run still waits in its queue (`waiting`:
    the task is starting) and why it ended the run itself (`why`, the task's last error)."""
    now = utcnow()
    if code is not None:
        status = to_int(code)
        if status is None:
            return TaskChange(task.id, TaskState.FAILED, ended_at=now,
                              last_error=f"unreadable exit status {code!r}")  # fmt: skip
        if task.state == TaskState.STOPPING:
            return TaskChange(task.id, TaskState.STOPPED, exit_status=status, ended_at=now)
        state = TaskState.SUCCEEDED if status == 0 else TaskState.FAILED
        change = TaskChange(task.id, state, exit_status=status, ended_at=now)
        # "Slurm ended it (TIMEOUT): …": the batch system's words for an unsuccessful end
        return replace(change, last_error=why) if why and status != 0 else change
    if alive and waiting:
        if task.state == TaskState.RUNNING:
            return TaskChange(task.id, TaskState.STARTING)
        return None
    if alive:
        if task.state == TaskState.STARTING:
            return TaskChange(task.id, TaskState.RUNNING, started_at=task.started_at or now)
        return None
    if task.state == TaskState.STOPPING:
        return TaskChange(task.id, TaskState.STOPPED, ended_at=now)
    if why:
        return TaskChange(task.id, TaskState.LOST, ended_at=now, last_error=why)
    return TaskChange(
        task.id,
        TaskState.LOST,
        ended_at=now,
        last_error=(
            f"{what} {task.session} ended without an exit status "
            "(killed outside gpuhive, or the host restarted)"
        ),
    )


def apply_change(task: Task, change: TaskChange) -> Task:
    """`task` as it is after `change` is stored."""
    values: dict[str, Any] = {"state": change.state}
    for name, value in change.values().items():
        if name != "state":
            values[name] = value
    return replace(task, **values)
