"""POSIX shell command lines for resolved tasks, plain or inside a detached GNU screen session."""

from __future__ import annotations

import hashlib
import re
import shlex

from .tasks import TaskSpec, TemplateError
from .template import IDENTIFIER

SESSION_PREFIX = "gpuhive"
SESSION_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# Screen's socket path (/run/screen/S-user/PID.NAME) must fit in a UNIX socket address.
MAX_JOB_PART = 40


def shell_command(task: TaskSpec) -> str:
    """`cd DIR && env NAME=value ... bash -c COMMAND`, every word shell-quoted."""
    words = ["env"]
    for name, value in task.env.items():
        if not IDENTIFIER.match(name):
            raise TemplateError(f"environment variable name {name!r} is not valid")
        _check(f"environment variable {name}", value)
        words.append(shlex.quote(f"{name}={value}"))
    _check("command", task.command)
    words += ["bash", "-c", shlex.quote(task.command)]
    line = " ".join(words)
    if task.workdir:
        _check("workdir", task.workdir)
        line = f"cd -- {shlex.quote(task.workdir)} && {line}"
    return line


def session_name(job_name: str, task_index: int) -> str:
    """`gpuhive-<job>-<task>` with only [A-Za-z0-9_.-]; a name that had to change gets a hash."""
    part = _UNSAFE.sub("_", job_name).strip("._-")[:MAX_JOB_PART] or "job"
    if part != job_name:
        part += "." + hashlib.sha256(job_name.encode()).hexdigest()[:8]
    return f"{SESSION_PREFIX}-{part}-{int(task_index)}"


def screen_script(task: TaskSpec, log_path: str, exit_path: str) -> str:
    """The bash script a screen session runs: the task, its log, then its exit status."""
    _check("log path", log_path)
    _check("exit path", exit_path)
    exit_file = shlex.quote(exit_path)
    temporary = shlex.quote(exit_path + ".tmp")
    # `trap : INT`: Ctrl-C (SIGINT to the process group) stops the task, not this shell, so the
    # exit status is still written. `tee -i` ignores SIGINT so the last output reaches the log.
    # The status goes through a temporary file so a reader never sees a half-written one.
    return (
        "trap : INT; "
        f"{{ {shell_command(task)}; }} 2>&1 | tee -i -a {shlex.quote(log_path)}; "
        'status="${PIPESTATUS[0]}"; '
        f'echo "$status" > {temporary} && mv -f -- {temporary} {exit_file}'
    )


def screen_command(session: str, task: TaskSpec, log_path: str, exit_path: str) -> str:
    """`screen -dmS SESSION bash -c SCRIPT`: the task detached in GNU screen, logged, exit kept."""
    if not SESSION_NAME.match(session):
        raise TemplateError(
            f"screen session name {session!r} may only contain letters, digits, '_', '.', '-' "
            "(use session_name())"
        )
    script = screen_script(task, log_path, exit_path)
    return f"screen -dmS {shlex.quote(session)} bash -c {shlex.quote(script)}"


def _check(what: str, value: str) -> None:
    if "\0" in value:
        raise TemplateError(f"{what} contains a NUL byte")
