"""POSIX shell command lines for resolved tasks: the readable one-line form, and the script a
task's runner (`hosts/runners/`) starts.

`shell_command` is the readable one-line form (previews, plain shells). A started task never
carries its environment values on a command line: they go to a file only its owner can read.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from ..hosts.environment import BASE_NAMES
from .tasks import TaskSpec, TemplateError
from .template import IDENTIFIER

# What a task keeps of its runner's environment when it starts from an empty one (`clean`):
# the fixed base of the local transport, and what the runner sets (its `kept_names`).
KEPT_NAMES = BASE_NAMES


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


def env_path(exit_path: str) -> str:
    """The task's environment file, next to its exit file (`…/1-0.exit` → `…/1-0.env`)."""
    stem = exit_path[: -len(".exit")] if exit_path.endswith(".exit") else exit_path
    return stem + ".env"


def env_file(task: TaskSpec, host_env: Mapping[str, str] | None = None) -> str:
    """The task's environment as `export NAME='value'` lines for sh and bash to source.

    The host's configured env comes first, then the job's and the template's (which win).
    The start script writes it to a 0600 file from its stdin: values never reach an argv,
    where `ps` would show them to every user of the host.
    """
    lines = []
    for name, value in {**(host_env or {}), **task.env}.items():
        if not IDENTIFIER.match(name):
            raise TemplateError(f"environment variable name {name!r} is not valid")
        _check(f"environment variable {name}", value)
        lines.append(f"export {name}={shlex.quote(value)}\n")
    return "".join(lines)


def task_script(
    task: TaskSpec,
    log_path: str,
    exit_path: str,
    env: str | None = None,
    *,
    clean: bool = False,
    keep: Sequence[str] = (),
    run: str | None = None,
) -> str:
    """The bash script a task's runner starts: the task, its log, then its exit status.

    The task sources its environment file `env` (default: `env_path(exit_path)`), enters its
    workdir and runs its command with the umask its session had (`$GPUHIVE_UMASK`; the log
    and exit file keep the start script's 077). With `clean` (the local transport) it starts
    from an empty environment that keeps only `KEPT_NAMES` and `keep` (the runner's own).
    `run` (shell text, already quoted, that ends in `exec`) replaces sourcing the env file and
    running the command: a container task's engine line, which hands the env file to it.
    """
    env = env or env_path(exit_path)
    for what, value in (("log path", log_path), ("exit path", exit_path), ("env path", env)):
        _check(what, value)
    exit_file = shlex.quote(exit_path)
    temporary = shlex.quote(exit_path + ".tmp")
    _check("command", task.command)
    source = env if "/" in env else "./" + env  # `. NAME` would search PATH
    if run is None:
        run = f". {shlex.quote(source)} && "
        if task.workdir:
            _check("workdir", task.workdir)
            run += f"cd -- {shlex.quote(task.workdir)} && "
        run += f"exec bash -c {shlex.quote(task.command)}"
    start = f"bash --noprofile --norc -c {shlex.quote(run)}"
    if clean:
        names = " ".join(dict.fromkeys([*KEPT_NAMES, *keep]))
        start = (
            f'set --; for n in {names}; do [ -z "${{!n+x}}" ] || set -- "$@" "$n=${{!n}}"; '
            f'done; env -i "$@" {start}'
        )
    # `trap : INT`: Ctrl-C (SIGINT to the process group) stops the task, not this shell, so the
    # exit status is still written; so do a preemptible job's signals (TERM, USR1, USR2).
    # `tee` ignores them all so the last output (a checkpoint's message) reaches the log.
    # The status goes through a temporary file so a reader never sees a half-written one.
    return (
        "trap : INT TERM USR1 USR2; "
        f'{{ umask "${{GPUHIVE_UMASK:-022}}"; unset GPUHIVE_UMASK; {start}; }} 2>&1 '
        f"| (trap '' TERM USR1 USR2; exec tee -i -a {shlex.quote(log_path)}); "
        'status="${PIPESTATUS[0]}"; '
        f'echo "$status" > {temporary} && mv -f -- {temporary} {exit_file}'
    )


def _check(what: str, value: str) -> None:
    if "\0" in value:
        raise TemplateError(f"{what} contains a NUL byte")
