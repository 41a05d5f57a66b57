"""GNU screen as the task runner: each task in a detached screen session of its owner, named
after the task; its handle is the session's pid, its process group the one of the session's
child (the task's shell), which stop signals.

The only module that names screen's commands (`tests/test_architecture_backends.py`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ...model.jobs import SESSION_NAME, TemplateError
from ..vendors import DoctorCheck
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
    RunnerError,
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

TICK = 0.1  # seconds per wait step of the stop script

_PRELUDE = f"""
command -v screen >/dev/null 2>&1 || {{
  echo "GNU screen is not installed (or not on PATH) for $(id -un)" >&2; exit {NOT_INSTALLED}; }}
{HOME}"""

# Prints the screen pid of session $1 (`screen -ls` lists `PID.NAME`; dead sockets skipped).
_SESSION_PID = r"""
session_pid() {
  screen -ls 2>/dev/null | awk -v name="$1" '
    /\(Dead/ { next }
    { n = index($1, ".") }
    n > 1 && substr($1, n + 1) == name { print substr($1, 1, n - 1); exit }'
}
session_group() {
  child=$(ps -o pid= --ppid "$1" 2>/dev/null | awk 'NR == 1 { print $1 }')
  [ -n "$child" ] && ps -o pgid= -p "$child" 2>/dev/null | awk 'NR == 1 { print $1 }'
}
"""

# $1 session, $2 log dir, $3 exit file, $4 log file, $5 env file (see PREPARE).
_START = f"""{_PRELUDE}{_SESSION_PID}
if [ -n "$(session_pid "$1")" ]; then
  echo "a screen session $1 already exists for $(id -un)" >&2; exit {EXISTS}
fi
{PREPARE}
%(launch)s </dev/null >/dev/null || exit {LAUNCH_FAILED}
n=0
while :; do
  spid=$(session_pid "$1")
  [ -n "$spid" ] || [ -f "$3" ] || [ "$n" -ge 50 ] && break
  n=$((n + 1)); sleep 0.1
done
pgid=""
n=0
while [ -n "$spid" ] && [ -z "$pgid" ] && [ "$n" -lt 20 ]; do
  pgid=$(session_group "$spid"); n=$((n + 1)); [ -n "$pgid" ] || sleep 0.05
done
echo "started ${{spid:--}} ${{pgid:--}}"
{START_EXIT}"""

# Pairs of (session, exit file). Lists sessions first, then exit files: a task writes its
# exit file before its session ends, so "no session and no exit file" means it was killed.
_SYNC = f"""{_PRELUDE}
listing=$(screen -ls 2>&1)
case "$listing" in
  *"No Sockets found"*|*"There is a screen on"*|*"There are screens on"*) ;;
  *) printf '%s\\n' "$listing" >&2; exit {BAD_LISTING} ;;
esac
printf '%s\\n' "$listing" | awk '
  /\\(Dead/ {{ next }}
  {{ n = index($1, "."); if (n > 1) print "alive", substr($1, n + 1), substr($1, 1, n - 1) }}'
{EXITS}"""

# $1 grace ticks, $2 kill ticks (0.1 s each), $3 signal, then pairs of (session, exit file).
# The signal to each session's process group; after the grace SIGTERM, then SIGKILL and quit.
_STOP = f"""{_PRELUDE}{_SESSION_PID}
grace=$1; patience=$2; first=$3; shift 3
case $first in INT|TERM|USR1|USR2) ;; *) first=INT ;; esac
targets=""
name=""
for arg in "$@"; do
  if [ -z "$name" ]; then name=$arg; continue; fi
  spid=$(session_pid "$name")
  if [ -z "$spid" ]; then
    echo "gone $name"
  else
    pgid=$(session_group "$spid")
    [ -n "$pgid" ] && kill -s "$first" -- "-$pgid" 2>/dev/null
    echo "interrupted $name $spid ${{pgid:--}}"
    targets="$targets $name:$spid:${{pgid:--}}"
  fi
  name=""
done
prune() {{
  left=""
  for t in $targets; do
    s=${{t#*:}}; s=${{s%%:*}}
    kill -0 "$s" 2>/dev/null && left="$left $t"
  done
  targets=$left
}}
wait_ticks() {{
  i=0
  while [ "$i" -lt "$1" ]; do
    prune; [ -z "$targets" ] && return 0
    sleep 0.1; i=$((i + 1))
  done
  prune
}}
wait_ticks "$grace"
for t in $targets; do
  g=${{t##*:}}; [ "$g" != - ] && kill -s TERM -- "-$g" 2>/dev/null
  echo "terminated ${{t%%:*}}"
done
wait_ticks "$patience"
for t in $targets; do
  g=${{t##*:}}; [ "$g" != - ] && kill -s KILL -- "-$g" 2>/dev/null
  screen -S "${{t%%:*}}" -X quit >/dev/null 2>&1
  echo "killed ${{t%%:*}}"
done
{EXITS}"""

_FIND = "command -v screen >/dev/null || exit 127; screen -v 2>&1; exit 0"


def screen_command(session: str, body: str) -> str:
    """`screen -dmS SESSION bash -c BODY`: the task's script detached in GNU screen.

    No environment value is in it: the task reads them from its env file.
    """
    if not SESSION_NAME.match(session):
        raise TemplateError(
            f"screen session name {session!r} may only contain letters, digits, '_', '.', '-' "
            "(use session_name())"
        )
    return f"screen -dmS {shlex.quote(session)} bash -c {shlex.quote(body)}"


class ScreenRunner(TaskRunner):
    """Tasks in detached GNU screen sessions of their owner (the default runner)."""

    name = "screen"
    what = "screen session"
    # What screen sets for the programs inside it, kept by a clean start.
    kept_names = ("STY", "WINDOW", "TERM")

    async def start(self, shell: Shell, launch: TaskStart) -> Started:
        script = start_script(_START, screen_command(launch.name, launch.body), launch.env_text)
        result = await shell(script, launch_args(launch), None)
        if result.exit_status == NOT_INSTALLED:
            raise RunnerError(f"GNU screen is not installed on {launch.host} for {launch.account}")
        done = started(launch, result, self)
        if done.handle is None and done.exit_code is None:
            raise RunnerError("the screen session ended at once without an exit status")
        return done

    async def sync(self, shell: Shell, watched: Sequence[Watched]) -> Census:
        return await census(shell, _SYNC, watched, "cannot list the screen sessions")

    async def stop(self, shell: Shell, watched: Sequence[Watched], how: Stopping) -> Halted:
        ticks = [round(how.grace / TICK), round(how.patience / TICK)]
        args: list[str | int] = [*ticks, how.signal.removeprefix("SIG"), *pairs(watched)]
        return await halt(shell, _STOP, args, how.limit())

    def attach(self, name: str, log_path: str) -> list[str]:
        return ["screen", "-x", name]

    def doctor_find(self) -> str:
        return _FIND

    def doctor_check(self, host: str, status: int, text: str) -> DoctorCheck:
        if status == 0:
            first = text.strip().splitlines()[0] if text.strip() else ""
            return DoctorCheck(host, "screen", "ok", first)
        return DoctorCheck(
            host,
            "screen",
            "warn",
            "GNU screen is not installed: queued jobs cannot run",
            "install it (apt install screen, dnf install screen).",
        )
