"""The POSIX sh script the launcher runs on hosts to read a task's log (as the task's owner,
fed to `sh -s` on stdin). Starting, following and stopping tasks are the host's task runner's
(`hosts/runners/`); the paths and command lines are built as the runners build theirs.

The script first changes to the owner's home, so paths under `~/` are passed relative to it.
Values arrive as positional arguments, never inside the script text.
"""

from __future__ import annotations

from ..hosts.runners import NO_HOME, host_path, sh_command

__all__ = ["LOG", "host_path", "sh_command"]

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
