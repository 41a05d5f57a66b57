"""The task runner seam: how a job's task is started, followed and stopped on its host.

A host's backend brings its runner (`HostBackend.runner`); today's is GNU screen
(`runners/screen.py`), and a backend of another kind (a batch system) can bring its own. The
launcher hands a runner what it needs and reads back neutral results:

- `start(shell, launch)`: start `launch.body` (`launch` a `TaskStart`; the body a bash
  script that runs the task, appends its output to its log and writes its exit status to its
  exit file) as the owner, named `launch.name`, after writing the task's log folder and env
  file; `Started` (an opaque
  `handle` the runner knows the run by, its process group) or `RunnerError`;
- `sync(shell, watched)`: which runs are still there (`Census.alive`) and which exit files
  exist (`Census.exits`), in one round trip per (host, owner);
- `stop(shell, watched, how)`: `how.signal` to each run, TERM after its grace, KILL after
  its patience (`Stopping`); `Halted` (those already gone, and exit files);
- `attach(name, log_path)`: the command that shows a run to its owner in a terminal;
- `doctor_find()`/`doctor_check(...)`: the doctor's check of the runner's tool.

`shell` runs a script (fed on stdin: secrets never reach an argv) with its command line
(`sh_command`) as the task's owner, through the host's backend. Runners share the files'
part of the protocol below (log folder, env file, exit files); only a runner's module names
its tool's commands (`tests/test_architecture_backends.py` holds it).
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from ..status import CommandResult
from ..vendors import DoctorCheck

# (script fed on stdin, its command line, timeout or None for the default) -> its result
Placement = tuple[int, tuple[tuple[str, int], ...]]  # (engine job id, its GPUs' node and index)
Shell = Callable[[str, str, float | None], Awaitable[CommandResult]]

# Exit statuses of the start script for failures it recognizes (shared by the runners).
NOT_INSTALLED = 90
NO_HOME = 91
NO_LOG_DIR = 92
EXISTS = 93
LAUNCH_FAILED = 94
BAD_LISTING = 95
NO_ENV_FILE = 96

HOME = f"""
cd ~ || {{ echo "cannot enter the home directory of $(id -un)" >&2; exit {NO_HOME}; }}
"""

# $2 log dir, $3 exit file, $4 log file, $5 env file; then the env file's text (a
# here-document: it arrives on stdin with the script, never in an argument). Files are made
# under umask 077 (log, exit, env 0600; the log dir 0700, unless it is the home directory or
# belongs to someone else); the task gets the session's own umask ($GPUHIVE_UMASK).
PREPARE = f"""
GPUHIVE_UMASK=$(umask); export GPUHIVE_UMASK
umask 077
mkdir -p -- "$2" || exit {NO_LOG_DIR}
if [ "$2" != . ] && [ -O "$2" ]; then chmod 700 -- "$2" || exit {NO_LOG_DIR}; fi
rm -f -- "$3" "$3.tmp" "$5"
if [ -e "$4" ]; then chmod 600 -- "$4" || exit {NO_LOG_DIR}; fi
cat > "$5" <<'%(delimiter)s' || exit {NO_ENV_FILE}
%(env)s%(delimiter)s
"""

# What every start script ends with: the exit status, when the task has already ended.
START_EXIT = """
if [ -f "$3" ]; then echo "exit $(head -c 64 -- "$3" | tr -d '\\n')"; fi
"""

# Prints `exit NAME CODE` for each pair of (name, exit file) left in "$@".
EXITS = """
while [ "$#" -ge 2 ]; do
  if [ -f "$2" ]; then printf 'exit %s %s\\n' "$1" "$(head -c 64 -- "$2" | tr -d '\\n')"; fi
  shift 2
done
"""

_PLACEHOLDER = re.compile(r"%\((delimiter|env|launch)\)s")


class RunnerError(Exception):
    """A runner could not do what it was asked; `reason` is a sentence for people."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TaskStart:
    """One task to start. Paths are as the scripts take them (`host_path`)."""

    name: str  # the task's name on its host ([A-Za-z0-9_.-], unique there)
    body: str  # bash: runs the task, appends to its log, writes its exit file
    log_dir: str
    log_path: str
    exit_path: str
    env_path: str
    env_text: str  # the env file's text (`export NAME=value` lines)
    host: str
    account: str  # the owner's UNIX account, for reasons
    # For a batch system's runner (Slurm): the task's GPU count, the engine reservation that
    # holds them (None: none), and the last instant the run may last to (None: no limit).
    gpu_count: int = 0
    hold: str | None = None
    until: datetime | None = None
    anywhere: bool = False  # the engine picks the node (its own queue), not the task's host


@dataclass(frozen=True)
class Started:
    """A started run: the runner's handle and process group (None: not seen), and the exit
    file's text when it had already ended."""

    handle: int | None
    pgid: int | None
    exit_code: str | None = None


@dataclass(frozen=True)
class Watched:
    """One run to look at or stop: its name and exit file (as the scripts take it)."""

    name: str
    exit_path: str
    unplaced: bool = False  # its engine picked the node: `sync` says which GPUs it gave


@dataclass(frozen=True)
class Stopping:
    """How to stop runs: `signal` first, SIGTERM after `grace` seconds, SIGKILL after
    `patience` more; `timeout` is the host command's own limit besides those."""

    grace: float
    patience: float
    signal: str = "SIGINT"
    timeout: float = 30.0

    def limit(self) -> float:
        """The stop script's whole time limit."""
        return self.grace + self.patience + self.timeout


@dataclass(frozen=True)
class Census:
    """What `sync` saw: runs still there (name -> handle) and exit files (name -> text);
    a batch system's runner also says which runs still wait in its queue (`waiting`), when it
    expects to start them (`starts`, where it says) and why it ended runs itself (`why`:
    name -> words, e.g. "Slurm ended it: TIMEOUT")."""

    alive: Mapping[str, int | None]
    exits: Mapping[str, str]
    waiting: frozenset[str] = frozenset()
    why: Mapping[str, str] = field(default_factory=dict)
    starts: Mapping[str, datetime] = field(default_factory=dict)
    # unplaced runs that run now: the engine's job id, (node, GPU index) of each GPU it gave
    placed: Mapping[str, Placement] = field(default_factory=dict)


@dataclass(frozen=True)
class Halted:
    """What `stop` saw: the runs already gone when asked, and exit files (name -> text)."""

    gone: frozenset[str]
    exits: Mapping[str, str]


class TaskRunner:
    """How tasks run on hosts of one kind (subclass it; see `runners/screen.py`)."""

    name: ClassVar[str] = ""
    what: ClassVar[str] = "task"  # one run, in words ("screen session")
    # Variables the runner sets for the task that a clean start (`clean_start`) keeps.
    kept_names: ClassVar[tuple[str, ...]] = ()

    async def start(self, shell: Shell, launch: TaskStart) -> Started:
        raise NotImplementedError

    async def sync(self, shell: Shell, watched: Sequence[Watched]) -> Census:
        raise NotImplementedError

    async def stop(self, shell: Shell, watched: Sequence[Watched], how: Stopping) -> Halted:
        raise NotImplementedError

    def attach(self, name: str, log_path: str) -> list[str]:
        """The command that shows run `name` in a terminal (default: follow its log)."""
        return ["tail", "-f", "--", log_path]

    def doctor_find(self) -> str | None:
        """A command whose answer `doctor_check` judges (None: nothing to check)."""
        return None

    def doctor_check(self, host: str, status: int, text: str) -> DoctorCheck | None:
        return None

    def start_problem(self, launch: TaskStart, result: CommandResult) -> str | None:
        """Why the start script failed, in words; None when it ran to the end."""
        status, err = result.exit_status, result.stderr.strip()
        where = f"on {launch.host} for {launch.account}"
        if status == 0 and marker(result.stdout, "started"):
            return None
        if status == NO_HOME:
            return f"cannot enter the home directory of {launch.account} on {launch.host}"
        if status == NO_LOG_DIR:
            return f"cannot create the log directory {launch.log_dir} {where}: " + (
                err or "permission denied"
            )
        if status == NO_ENV_FILE:
            return f"cannot write the task's environment file {where}: {err or 'permission denied'}"
        if status == EXISTS:
            return f"a {self.what} {launch.name} already exists {where}"
        if status == LAUNCH_FAILED:
            return f"{self.name} failed to start {where}: {err or f'exit status {status}'}"
        return f"could not run a command as {launch.account} on {launch.host}: " + (
            err or f"exit {status}"
        )


def start_script(template: str, launch: str, env_text: str = "") -> str:
    """A start script `template` with its `%(launch)s` line (already quoted) and the env
    file's text in its here-document (`PREPARE`), whose end marker no line of it matches."""
    delimiter = "GPUHIVE_ENV_END"
    while delimiter in env_text.split("\n"):
        delimiter = f"GPUHIVE_ENV_{secrets.token_hex(8)}"
    if env_text and not env_text.endswith("\n"):
        env_text += "\n"
    values = {"delimiter": delimiter, "launch": launch, "env": env_text}
    # One pass: a placeholder inside a value is never replaced.
    return _PLACEHOLDER.sub(lambda match: values[match[1]], template)


def launch_args(launch: TaskStart) -> str:
    """The start script's command line: name, log dir, exit, log and env file."""
    return sh_command(
        launch.name, launch.log_dir, launch.exit_path, launch.log_path, launch.env_path
    )


def started(launch: TaskStart, result: CommandResult, runner: TaskRunner) -> Started:
    """The `started HANDLE PGID` and `exit CODE` markers of a start script, or RunnerError."""
    problem = runner.start_problem(launch, result)
    if problem:
        raise RunnerError(problem)
    words = marker(result.stdout, "started")
    handle, pgid = (to_int(words[0]), to_int(words[1])) if len(words) == 2 else (None, None)
    code = marker(result.stdout, "exit")
    return Started(handle, pgid, code[0] if code else None)


async def census(shell: Shell, script: str, watched: Sequence[Watched], failed: str) -> Census:
    """Run a sync `script` over (name, exit file) pairs; it prints `alive NAME HANDLE` for
    the runs still there, then `EXITS`. RunnerError `failed: ...` when it fails."""
    result = await shell(script, sh_command(*pairs(watched)), None)
    if result.exit_status != 0:
        raise RunnerError(f"{failed}: {tail(result)}")
    alive = {w[0]: to_int(w[1]) for w in markers(result.stdout, "alive") if len(w) > 1}
    return Census(alive, exits(result.stdout))


async def halt(shell: Shell, script: str, args: Sequence[str | int], timeout: float) -> Halted:
    """Run a stop `script` with `args`; it prints `gone NAME` for each run already gone, then
    `EXITS`. RunnerError when it fails."""
    result = await shell(script, sh_command(*args), timeout)
    if result.exit_status != 0:
        raise RunnerError(f"could not stop it: {tail(result)}")
    gone = frozenset(w[0] for w in markers(result.stdout, "gone") if w)
    return Halted(gone, exits(result.stdout))


def exits(stdout: str) -> dict[str, str]:
    """The `exit NAME CODE` markers (`EXITS`): name -> code text ('' when empty)."""
    return {w[0]: w[1] if len(w) > 1 else "" for w in markers(stdout, "exit") if w}


def pairs(watched: Sequence[Watched]) -> list[str]:
    """(name, exit file) of each run, flat, as the scripts take them."""
    return [part for w in watched for part in (w.name, w.exit_path)]


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


def sh_command(*args: str | int) -> str:
    """`sh -s -- ARGS`: runs the script given on stdin in any login shell; args quoted."""
    return " ".join(["sh", "-s", "--", *(shlex.quote(str(arg)) for arg in args)])


def host_path(path: str) -> str:
    """A path as the scripts take it: `~/x` becomes `./x` (scripts run in the home dir)."""
    if path == "~":
        return "."
    if path.startswith("~/"):
        return "./" + path[2:]
    return path
