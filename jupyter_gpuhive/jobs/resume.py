"""The templates' `resume` option: ship the checkpoint helper to the host and put it on the path.

A GPU host may have nothing but its own Python. The helper (`jobs/checkpoint.py`, standard
library only) travels in the task's environment file (written from stdin, mode 0600, never on
a command line), gzip-compressed and base64-encoded. Before the user's command, a few POSIX
shell words unpack it into `$GPUHIVE_CHECKPOINT_DIR/.gpuhive/gpuhive_checkpoint.py` (a temporary
name, then a rename: tasks that share a host and a directory never read a half-written file),
prepend that folder to `PYTHONPATH` and replace themselves with the command (`exec`): the
preemption signal reaches the user's process, not a shell in between.
"""

from __future__ import annotations

import ast
import base64
import gzip
import shlex
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from .tasks import TaskSpec
from .template import Option, int_option

MODULE = "gpuhive_checkpoint"
SOURCE_ENV = "GPUHIVE_CHECKPOINT_SOURCE"
EVERY_ENV = "GPUHIVE_CHECKPOINT_EVERY"
ENV_NAMES = (SOURCE_ENV, EVERY_ENV)
MAX_EVERY = 10**9

OPTIONS = {
    "resume": Option(
        "checkpoint and resume: puts the gpuhive_checkpoint module on PYTHONPATH "
        "(Checkpoint().resume() / .step(state)); see the preemptible jobs how-to",
        False,
        bool,
    ),
    "checkpoint_every": Option(
        "with resume: save every N steps (GPUHIVE_CHECKPOINT_EVERY); a save also follows "
        "the preemption signal",
        100,
        int,
    ),
}


@cache
def packed_source() -> str:
    """The helper's source without docstrings, gzip-compressed, base64 (one line)."""
    return pack(Path(__file__).with_name("checkpoint.py"))


def pack(path: str | Path) -> str:
    """A module's source without docstrings, gzip-compressed, base64 (one line): what travels
    in a task's environment file to be unpacked on the host."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    text = ast.unparse(tree) + "\n"
    return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def unpack_command() -> str:
    """The shell words that unpack the helper and put it on PYTHONPATH (before `exec CMD`)."""
    return (
        ': "${GPUHIVE_CHECKPOINT_DIR:=$PWD/gpuhive-checkpoints}" && '
        "export GPUHIVE_CHECKPOINT_DIR && "
        'gpuhive_lib="$GPUHIVE_CHECKPOINT_DIR/.gpuhive" && '
        'mkdir -p -- "$gpuhive_lib" && '
        f'printf %s "${SOURCE_ENV}" | base64 -d | gzip -dc > "$gpuhive_lib/{MODULE}.py.$$" && '
        f'mv -f -- "$gpuhive_lib/{MODULE}.py.$$" "$gpuhive_lib/{MODULE}.py" && '
        f"unset {SOURCE_ENV} && "
        'export PYTHONPATH="$gpuhive_lib${PYTHONPATH:+:$PYTHONPATH}" && '
        "unset gpuhive_lib && "
    )


def resumable(tasks: list[TaskSpec], options: dict[str, Any]) -> list[TaskSpec]:
    """The tasks, wired for checkpoints when the `resume` option is on (else unchanged)."""
    if not options["resume"]:
        return tasks
    every = int_option(options, "checkpoint_every", 1, MAX_EVERY)
    prefix = unpack_command()
    return [
        replace(
            task,
            command=f"{prefix}exec bash -c {shlex.quote(task.command)}",
            env={**task.env, EVERY_ENV: str(every), SOURCE_ENV: packed_source()},
        )
        for task in tasks
    ]
