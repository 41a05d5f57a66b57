"""Slurm as the task runner: each task is a batch job of its owner (`sbatch`), on its node,
in the engine reservation that holds its GPUs (`--reservation=gpuhive-N --gres=gpu:N`).

Its scripts run through the Slurm backend's task shell: on the submit host (where gpuhive
runs), as the task owner's UNIX account, with an explicit environment; so Slurm itself sees
the owner submit, follow and cancel their own jobs, and nothing runs as the server's account.
A run's handle is its Slurm job id; it has no process group here. A job's name is the task's
session name, so `sync` and `stop` find the owner's jobs by name (`squeue -u ME -n NAME`).

The task's script (the launcher's body: runs the task, appends to its log, writes its exit
status) is the batch script, fed to sbatch on stdin; the log and exit files live in the
owner's home, which the cluster's nodes share with the submit host. gpuhive's own GPU pinning
variables are left out of the task's env file: Slurm pins the job's GPUs (`--gres`) itself.

The only module that names Slurm's job commands (sbatch, squeue, scancel).
"""

from __future__ import annotations

import math
import secrets
import shlex
from collections.abc import Sequence
from datetime import datetime, timezone

from ...model import utcnow
from ...model.engines import PREFIX
from ...model.gpus import Pinning
from ..slurm import SlurmParseError
from ..slurmjobs import parse_jobs
from . import (
    BAD_LISTING,
    EXISTS,
    EXITS,
    HOME,
    LAUNCH_FAILED,
    NOT_INSTALLED,
    PREPARE,
    START_EXIT,
    Census,
    Halted,
    Placement,
    RunnerError,
    Shell,
    Started,
    Stopping,
    TaskRunner,
    TaskStart,
    Watched,
    exits,
    halt,
    launch_args,
    markers,
    pairs,
    sh_command,
    start_script,
    started,
    tail,
    to_int,
)

TICK = 0.2  # seconds per wait step of the stop script
# Slurm's job states (squeue %T): still queued, or holding its nodes
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING",
          "SUSPENDED", "STOPPED", "RESIZING"}  # fmt: skip
HOLDING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
# Ended by Slurm itself, in words (a job's own exit is its exit file's)
ENDED_BY_SLURM = {
    "TIMEOUT": "it reached its time limit",
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "PREEMPTED": "it was preempted",
    "DEADLINE": "it reached its deadline",
    "OUT_OF_MEMORY": "it ran out of memory",
    "REVOKED": "it was revoked",
    "CANCELLED": "it was cancelled in Slurm",
    "FAILED": "it failed to start",
}
_SQUEUE = "squeue -h -u \"$(id -un)\" -t all -o '%j %i %T %S %r'"
_PLACED = 'squeue --json -u "$(id -un)" -t running'

_PRELUDE = f"""
command -v sbatch >/dev/null 2>&1 || {{
  echo "Slurm's sbatch is not on PATH for $(id -un)" >&2; exit {NOT_INSTALLED}; }}
{HOME}"""

# $1 job name, $2 log dir, $3 exit file, $4 log file, $5 env file (see PREPARE).
_START = f"""{_PRELUDE}
if squeue -h -u "$(id -un)" -n "$1" -t pending,running,suspended -o %i | grep -q .; then
  echo "a Slurm job $1 already exists for $(id -un)" >&2; exit {EXISTS}
fi
{PREPARE}
id=$(%(launch)s) || exit {LAUNCH_FAILED}
echo "started ${{id%%;*}} -"
{START_EXIT}"""

# Pairs of (job name, exit file): `job NAME ID STATE REASON` for each of the owner's jobs
# that Slurm still knows, then the exit files.
_SYNC = f"""{_PRELUDE}
listing=$({_SQUEUE} 2>&1) || {{ printf '%s\\n' "$listing" >&2; exit {BAD_LISTING}; }}
printf '%s\\n' "$listing" | awk 'NF >= 3 {{ print "job", $0 }}'
{EXITS}"""

# $1 grace ticks, $2 kill ticks, $3 signal, then pairs of (job name, exit file). The signal to
# every process of each job (its batch shell traps it: the task ends, the exit file is
# written); after the grace, scancel (Slurm's TERM, then KILL); then wait for it to leave.
_STOP = f"""{_PRELUDE}
grace=$1; patience=$2; first=$3; shift 3
case $first in INT|TERM|USR1|USR2) ;; *) first=INT ;; esac
live() {{ squeue -h -u "$(id -un)" -n "$1" -t pending,running,suspended,completing -o %i; }}
ids=""
name=""
for arg in "$@"; do
  if [ -z "$name" ]; then name=$arg; continue; fi
  found=$(live "$name")
  if [ -z "$found" ]; then
    echo "gone $name"
  else
    for i in $found; do scancel --full -s "$first" "$i" 2>/dev/null; ids="$ids $i"; done
    echo "interrupted $name $found"
  fi
  name=""
done
still() {{
  [ -z "$ids" ] && return 1
  squeue -h -j "$(echo $ids | tr ' ' ,)" -t pending,running,suspended,completing -o %i \\
    2>/dev/null | grep -q .
}}
wait_ticks() {{
  i=0
  while [ "$i" -lt "$1" ]; do still || return 0; sleep 0.2; i=$((i + 1)); done
}}
wait_ticks "$grace"
if still; then for i in $ids; do scancel "$i" 2>/dev/null; done; echo "terminated"; fi
wait_ticks "$patience"
if still; then for i in $ids; do scancel -s KILL --full "$i" 2>/dev/null; done; echo "killed"; fi
wait_ticks 25
{EXITS}"""


def time_limit(until: datetime | None, now: datetime) -> str | None:
    """sbatch's `--time` (`MINUTES:SECONDS`) for a run that must end by `until` (None: none);
    at least one minute (Slurm's reservation ends the job anyway)."""
    if until is None:
        return None
    seconds = max(60, math.floor((until - now).total_seconds()))
    return f"{seconds // 60}:{seconds % 60:02d}"


def sbatch_line(launch: TaskStart, node: str, now: datetime) -> str:
    """`sbatch …  <<'END'` with the task's body as its batch script; every value quoted."""
    if launch.hold is not None and not (
        launch.hold.startswith(PREFIX) and launch.hold[len(PREFIX) :].isdigit()
    ):
        raise RunnerError(f"{launch.hold!r} is not a reservation name of gpuhive's")
    where = [] if launch.anywhere else [f"--nodelist={node}"]
    words = ["sbatch", "--parsable", f"--job-name={launch.name}", *where,
             "--nodes=1", "--ntasks=1", "--output=/dev/null", "--export=ALL"]  # fmt: skip
    if launch.gpu_count > 0:
        words.append(f"--gres=gpu:{int(launch.gpu_count)}")
    if launch.hold is not None:
        words.append(f"--reservation={launch.hold}")
    limit = time_limit(launch.until, now)
    if limit is not None:
        words.append(f"--time={limit}")
    script = f"#!/bin/bash\n{launch.body}\n"
    delimiter = "GPUHIVE_BATCH_END"
    while delimiter in script.split("\n"):
        delimiter = f"GPUHIVE_BATCH_{secrets.token_hex(8)}"
    return " ".join(shlex.quote(w) for w in words) + f" <<'{delimiter}'\n{script}{delimiter}\n"


def unpinned(env_text: str, names: Sequence[str]) -> str:
    """The env file's text without the vendor's pinning variables `names` (gpuhive's GPU
    UUIDs of a Slurm node mean nothing there: Slurm pins the job's GPUs itself)."""
    kept = [line for line in env_text.splitlines(keepends=True)
            if not any(line.startswith(f"export {name}=") for name in names)]  # fmt: skip
    return "".join(kept)


def read_jobs(stdout: str) -> dict[str, tuple[int | None, str, str, datetime | None]]:
    """The `job NAME ID STATE START REASON` lines: name -> (job id, state, reason, start),
    the newest job of each name (the highest id). START: when it started, or for a pending
    job when Slurm expects to start it (`squeue --start`'s estimate; None: not known)."""
    found: dict[str, tuple[int | None, str, str, datetime | None]] = {}
    for words in markers(stdout, "job"):
        if len(words) < 4:
            continue
        name, job_id, state = words[0], to_int(words[1]), words[2].upper()
        reason = " ".join(words[4:])
        kept = found.get(name)
        if kept is None or (job_id or 0) >= (kept[0] or 0):
            found[name] = (job_id, state, reason, _instant(words[3]))
    return found


def _instant(text: str) -> datetime | None:
    """squeue's `%S` (UTC: the clients run with TZ=UTC), or None (`N/A`, `Unknown`)."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def why_ended(state: str, reason: str) -> str | None:
    """Why Slurm ended a job, in words ('Slurm ended it (TIMEOUT): it reached its time
    limit'); None for a job that ended by itself (its exit file says how)."""
    words = ENDED_BY_SLURM.get(state)
    if words is None:
        return None
    detail = f"; Slurm's reason: {reason}" if reason and reason not in ("None", "(null)") else ""
    return f"Slurm ended it ({state}): {words}{detail}"


class SlurmRunner(TaskRunner):
    """Tasks as Slurm batch jobs of their owner on one node (the Slurm backend's runner)."""

    name = "slurm"
    what = "Slurm job"
    kept_names = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_GPUS",
                  "SLURM_CONF")  # fmt: skip

    def __init__(self, node: str, pinning: Pinning) -> None:
        self.node = node
        # the vendor's pinning variables, left out of a task's env file
        self.pinning = (pinning.visible, *pinning.fixed, *pinning.counted)

    async def start(self, shell: Shell, launch: TaskStart) -> Started:
        line = sbatch_line(launch, self.node, utcnow())
        script = start_script(_START, line, unpinned(launch.env_text, self.pinning))
        result = await shell(script, launch_args(launch), None)
        if result.exit_status == NOT_INSTALLED:
            raise RunnerError(f"Slurm's sbatch is not installed for {launch.account}")
        if result.exit_status == LAUNCH_FAILED:
            raise RunnerError(f"Slurm refused the job: {tail(result)}")
        done = started(launch, result, self)
        if done.handle is None and done.exit_code is None:
            raise RunnerError(f"sbatch gave no job id: {tail(result)}")
        return done

    async def sync(self, shell: Shell, watched: Sequence[Watched]) -> Census:
        result = await shell(_SYNC, sh_command(*pairs(watched)), None)
        if result.exit_status != 0:
            raise RunnerError(f"cannot list the Slurm jobs: {tail(result)}")
        jobs = read_jobs(result.stdout)
        names = {w.name for w in watched}
        alive = {name: job_id for name, (job_id, state, _, _) in jobs.items()
                 if name in names and state in QUEUED | HOLDING}  # fmt: skip
        waiting = frozenset(n for n in alive if jobs[n][1] in QUEUED)
        why = {name: said for name, (_, state, reason, _) in jobs.items()
               if name in names and (said := why_ended(state, reason))}  # fmt: skip
        starts = {n: at for n in waiting if (at := jobs[n][3]) is not None}
        running = {n: i for n, i in alive.items() if n not in waiting and i is not None}
        asked = {running[w.name]: w.name for w in watched if w.unplaced and w.name in running}
        placed = await self._placed(shell, asked)
        return Census(alive, exits(result.stdout), waiting, why, starts, placed)

    async def _placed(self, shell: Shell, names: dict[int, str]) -> dict[str, Placement]:
        """The GPUs (node, IDX) Slurm gave the owner's running jobs `names` (job id -> name),
        from `squeue --json`: only numbers, node lists and account names are read there."""
        if not names:
            return {}
        result = await shell(_PLACED, sh_command(), None)
        if result.exit_status != 0:
            raise RunnerError(f"cannot read the Slurm jobs' GPUs: {tail(result)}")
        try:
            found = parse_jobs(result.stdout)
        except SlurmParseError as error:
            raise RunnerError(f"cannot read the Slurm jobs' GPUs: {error}") from None
        return {names[job.job_id]: (job.job_id, job.gpus) for job in found if job.job_id in names}

    async def stop(self, shell: Shell, watched: Sequence[Watched], how: Stopping) -> Halted:
        ticks = [math.ceil(how.grace / TICK), math.ceil(how.patience / TICK)]
        args: list[str | int] = [*ticks, how.signal.removeprefix("SIG"), *pairs(watched)]
        return await halt(shell, _STOP, args, how.limit() + 10)
