"""The POSIX sh scripts the launcher runs on hosts (as the task's owner, fed to `sh -s` on stdin).

Each script first changes to the owner's home, so paths under `~/` are passed relative to it.
Values arrive as positional arguments, never inside the script text; the only values written
into a script are the screen command line, which `commands.screen_command` has quoted, and the
task's environment file (`commands.env_file`) in a quoted here-document: secrets travel on
stdin, never in an argv that `ps` shows to everyone.
"""

from __future__ import annotations

import re
import secrets
import shlex

# Exit statuses the start script uses for failures it recognizes.
NO_SCREEN = 90
NO_HOME = 91
NO_LOG_DIR = 92
SESSION_EXISTS = 93
SCREEN_FAILED = 94
BAD_LISTING = 95
NO_ENV_FILE = 96

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

_PRELUDE = f"""
command -v screen >/dev/null 2>&1 || {{
  echo "GNU screen is not installed (or not on PATH) for $(id -un)" >&2; exit {NO_SCREEN}; }}
cd ~ || {{ echo "cannot enter the home directory of $(id -un)" >&2; exit {NO_HOME}; }}
"""

# $1 session, $2 log dir, $3 exit file, $4 log file, $5 env file; then the env file's text
# (a here-document: it arrives on stdin with the script, never in an argument) and the screen
# command line. Files are made under umask 077 (log, exit, env 0600; the log dir 0700, unless
# it is the home directory or belongs to someone else); the task gets the session's own umask.
_START = f"""{_PRELUDE}{_SESSION_PID}
GPUHIVE_UMASK=$(umask); export GPUHIVE_UMASK
umask 077
mkdir -p -- "$2" || exit {NO_LOG_DIR}
if [ "$2" != . ] && [ -O "$2" ]; then chmod 700 -- "$2" || exit {NO_LOG_DIR}; fi
rm -f -- "$3" "$3.tmp" "$5"
if [ -e "$4" ]; then chmod 600 -- "$4" || exit {NO_LOG_DIR}; fi
if [ -n "$(session_pid "$1")" ]; then
  echo "a screen session $1 already exists for $(id -un)" >&2; exit {SESSION_EXISTS}
fi
cat > "$5" <<'%(delimiter)s' || exit {NO_ENV_FILE}
%(env)s%(delimiter)s
%(screen)s </dev/null >/dev/null || exit {SCREEN_FAILED}
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
if [ -f "$3" ]; then echo "exit $(head -c 64 -- "$3" | tr -d '\\n')"; fi
"""

# Pairs of (task id, exit file). Lists sessions first, then exit files: a task writes its
# exit file before its session ends, so "no session and no exit file" means it was killed.
SYNC = f"""{_PRELUDE}
listing=$(screen -ls 2>&1)
case "$listing" in
  *"No Sockets found"*|*"There is a screen on"*|*"There are screens on"*) ;;
  *) printf '%s\\n' "$listing" >&2; exit {BAD_LISTING} ;;
esac
printf '%s\\n' "$listing" | awk '
  /\\(Dead/ {{ next }}
  {{ n = index($1, "."); if (n > 1) print "session", substr($1, n + 1), substr($1, 1, n - 1) }}'
while [ "$#" -ge 2 ]; do
  if [ -f "$2" ]; then printf 'exit %s %s\\n' "$1" "$(head -c 64 -- "$2" | tr -d '\\n')"; fi
  shift 2
done
"""

# $1 grace ticks, $2 kill ticks (0.1 s each), then pairs of (session, exit file).
# SIGINT to each session's process group; after the grace SIGTERM, then SIGKILL and quit.
STOP = f"""{_PRELUDE}{_SESSION_PID}
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
while [ "$#" -ge 2 ]; do
  if [ -f "$2" ]; then printf 'exit %s %s\\n' "$1" "$(head -c 64 -- "$2" | tr -d '\\n')"; fi
  shift 2
done
"""

# $1 log file, $2 offset, $3 tail bytes (-1: none), $4 limit: "chunk SIZE START COUNT", base64.
LOG = f"""
cd ~ || exit {NO_HOME}
if [ ! -f "$1" ]; then echo "missing"; exit 0; fi
size=$(wc -c < "$1" | tr -d ' ')
start=$2
if [ "$3" -ge 0 ]; then start=$((size - $3)); fi
[ "$start" -lt 0 ] && start=0
[ "$start" -gt "$size" ] && start=$size
count=$((size - start))
[ "$count" -gt "$4" ] && count=$4
echo "chunk $size $start $count"
tail -c "+$((start + 1))" -- "$1" | head -c "$count" | base64
"""


_PLACEHOLDER = re.compile(r"%\((delimiter|screen|env)\)s")


def start_script(screen_command: str, env_text: str = "") -> str:
    """The start script with the (already quoted) screen command line and the env file's text.

    The text goes in a here-document whose end marker is chosen so that no line of it matches.
    """
    delimiter = "GPUHIVE_ENV_END"
    while delimiter in env_text.split("\n"):
        delimiter = f"GPUHIVE_ENV_{secrets.token_hex(8)}"
    if env_text and not env_text.endswith("\n"):
        env_text += "\n"
    values = {"delimiter": delimiter, "screen": screen_command, "env": env_text}
    # One pass: a placeholder inside a value is never replaced.
    return _PLACEHOLDER.sub(lambda match: values[match[1]], _START)


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
