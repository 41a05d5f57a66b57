"""A second task runner, written only against the seam (`hosts.runners`): no GNU screen, each
task a new session of its own (`setsid`), its pid in a file next to its exit file; and a
backend that brings it (the setpriv backend of `otherbackend.py`). Registered at run time."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import ClassVar

from jupyter_gpuhive.hosts.runners import (
    EXISTS,
    EXITS,
    HOME,
    LAUNCH_FAILED,
    PREPARE,
    START_EXIT,
    Census,
    Halted,
    Shell,
    Started,
    Stopping,
    TaskRunner,
    TaskStart,
    Watched,
    census,
    halt,
    launch_args,
    pairs,
    start_script,
    started,
)
from jupyter_gpuhive.model import HostDecl
from tests.support.otherbackend import SetprivBackend

NAME = "setpriv-setsid"

# The pid of the run whose pid file is $1, when it is still there (a session leader: its
# process group is its pid).
_ALIVE = r"""
alive() {
  [ -f "$1" ] || return 1
  p=$(head -c 20 -- "$1" | tr -dc 0-9)
  [ -n "$p" ] && [ "$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ')" = "$p" ] && echo "$p"
}
"""

# $1 name, $2 log dir, $3 exit file, $4 log file, $5 env file (see PREPARE).
_START = f"""{HOME}{_ALIVE}
if [ -n "$(alive "$3.pid")" ]; then echo "$1 is running already" >&2; exit {EXISTS}; fi
rm -f -- "$3.pid"
{PREPARE}
%(launch)s </dev/null >/dev/null 2>&1 || exit {LAUNCH_FAILED}
n=0
while [ ! -s "$3.pid" ] && [ "$n" -lt 50 ]; do n=$((n + 1)); sleep 0.1; done
[ -s "$3.pid" ] || {{ echo "no pid file" >&2; exit {LAUNCH_FAILED}; }}
p=$(head -c 20 -- "$3.pid")
echo "started $p $p"
{START_EXIT}"""

# Pairs of (name, exit file): `alive NAME PID` of the runs still there, then exit files.
_SYNC = f"""{HOME}{_ALIVE}
for a in "$@"; do
  if [ -z "$name" ]; then name=$a; continue; fi
  p=$(alive "$a.pid") && echo "alive $name $p"
  name=""
done
{EXITS}"""

# $1 grace (0.1 s ticks), $2 patience, $3 signal, then pairs: the signal to each run's
# process group, TERM after the grace, KILL after the patience.
_STOP = f"""{HOME}{_ALIVE}
grace=$1; patience=$2; first=$3; shift 3
groups=""
for a in "$@"; do
  if [ -z "$name" ]; then name=$a; continue; fi
  if p=$(alive "$a.pid"); then kill -s "$first" -- "-$p"; groups="$groups $p"
  else echo "gone $name"; fi
  name=""
done
settle() {{
  i=0
  while [ "$i" -lt "$1" ]; do
    left=""; for g in $groups; do kill -0 "$g" 2>/dev/null && left="$left $g"; done
    groups=$left; [ -z "$groups" ] && return 0
    sleep 0.1; i=$((i + 1))
  done
}}
settle "$grace"; for g in $groups; do kill -s TERM -- "-$g" 2>/dev/null; done
settle "$patience"; for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
{EXITS}"""


class SetsidRunner(TaskRunner):
    """Each task `setsid bash -c BODY`, its pid (= its process group) in `EXIT.pid`."""

    name = "setsid"
    what = "setsid run"
    kept_names: ClassVar[tuple[str, ...]] = ()

    async def start(self, shell: Shell, launch: TaskStart) -> Started:
        # The new session's leader writes its own pid, then becomes the task's script. Forked
        # by setsid, not put in the background by `&`: that would make the task ignore SIGINT.
        wrapper = 'echo "$$" > "$0.tmp" && mv -f -- "$0.tmp" "$0" && exec bash -c "$1"'
        line = f'setsid -f sh -c {shlex.quote(wrapper)} "$3.pid" {shlex.quote(launch.body)}'
        result = await shell(start_script(_START, line, launch.env_text), launch_args(launch), None)
        return started(launch, result, self)

    async def sync(self, shell: Shell, watched: Sequence[Watched]) -> Census:
        return await census(shell, _SYNC, watched, "cannot look at the setsid runs")

    async def stop(self, shell: Shell, watched: Sequence[Watched], how: Stopping) -> Halted:
        ticks = [round(how.grace * 10), round(how.patience * 10)]  # 0.1 s each
        args: list[str | int] = [*ticks, how.signal.removeprefix("SIG"), *pairs(watched)]
        return await halt(shell, _STOP, args, how.limit())


class SetsidBackend(SetprivBackend):
    """The setpriv backend, bringing the setsid runner instead of GNU screen."""

    name = NAME

    def runner(self, decl: HostDecl) -> TaskRunner:
        return SetsidRunner()
