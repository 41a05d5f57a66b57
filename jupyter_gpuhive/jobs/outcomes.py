"""What the host scripts print, read as task changes and reasons (for the launcher).

The scripts (``scripts``) print marker lines (``started PID PGID``, ``exit CODE``, ``session
NAME PID``, ``gone NAME``); these functions read them, and turn what `sync` saw into the change
of a task's state, or a failed start into a sentence for people.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..hosts.pool import CommandResult
from ..model import utcnow
from ..model.jobs import Task, TaskState
from ..store.jobs import TaskChange
from . import scripts


def observe(task: Task, has_session: bool, code: str | None) -> TaskChange | None:
    """The change that what `sync` saw on the host implies for one task (None: none)."""
    now = utcnow()
    if code is not None:
        status = to_int(code)
        if status is None:
            return TaskChange(task.id, TaskState.FAILED, ended_at=now,
                              last_error=f"unreadable exit status {code!r}")  # fmt: skip
        if task.state == TaskState.STOPPING:
            return TaskChange(task.id, TaskState.STOPPED, exit_status=status, ended_at=now)
        state = TaskState.SUCCEEDED if status == 0 else TaskState.FAILED
        return TaskChange(task.id, state, exit_status=status, ended_at=now)
    if has_session:
        if task.state == TaskState.STARTING:
            return TaskChange(task.id, TaskState.RUNNING, started_at=task.started_at or now)
        return None
    if task.state == TaskState.STOPPING:
        return TaskChange(task.id, TaskState.STOPPED, ended_at=now)
    return TaskChange(
        task.id,
        TaskState.LOST,
        ended_at=now,
        last_error=(
            f"screen session {task.session} ended without an exit status "
            "(killed outside gpuhive, or the host restarted)"
        ),
    )


def start_problem(task: Task, result: CommandResult, log_dir: str, account: str) -> str | None:
    """Why the start script failed (run as UNIX account `account`), in words; None when it
    ran to the end."""
    status, err = result.exit_status, result.stderr.strip()
    where = f"on {task.host} for {account}"
    if status == 0 and marker(result.stdout, "started"):
        return None
    if status == scripts.NO_SCREEN:
        return f"GNU screen is not installed {where}"
    if status == scripts.NO_HOME:
        return f"cannot enter the home directory of {account} on {task.host}"
    if status == scripts.NO_LOG_DIR:
        return f"cannot create the log directory {log_dir} {where}: {err or 'permission denied'}"
    if status == scripts.NO_ENV_FILE:
        return f"cannot write the task's environment file {where}: {err or 'permission denied'}"
    if status == scripts.SESSION_EXISTS:
        return f"a screen session {task.session} already exists {where}"
    if status == scripts.SCREEN_FAILED:
        return f"screen failed to start {where}: {err or f'exit status {status}'}"
    return f"could not run a command as {account} on {task.host}: {err or f'exit {status}'}"


def marker(stdout: str, name: str) -> list[str]:
    """The words after the last `name` marker line (empty when there is none)."""
    found = markers(stdout, name)
    return found[-1] if found else []


def markers(stdout: str, name: str) -> list[list[str]]:
    """The words after `name` on each output line that starts with it."""
    return [line.split()[1:] for line in stdout.splitlines() if line.split()[:1] == [name]]


def to_int(text: str) -> int | None:
    """`text` as an integer, or None when it is not one."""
    try:
        return int(text)
    except ValueError:
        return None


def tail(result: CommandResult) -> str:
    """The last lines a failed command said (its stderr, else its stdout), for a reason."""
    text = (result.stderr.strip() or result.stdout.strip()).splitlines()
    return " | ".join(text[-3:]) or f"exit status {result.exit_status}"


def apply_change(task: Task, change: TaskChange) -> Task:
    """`task` as it is after `change` is stored."""
    values: dict[str, Any] = {"state": change.state}
    for name, value in change.values().items():
        if name != "state":
            values[name] = value
    return replace(task, **values)
