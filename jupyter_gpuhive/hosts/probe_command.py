"""The probe's remote command: ONE shell command per host per sweep (or one loop per host).

The host's GPU vendor (hosts/vendors/) gives its part: its tool's queries, printed as its own
sections, leaving the GPU processes' PIDs in `$pids`. This part resolves the owners of those
processes with one `ps` and reads CPU and memory counters from /proc. It never sleeps: CPU
utilisation comes from the difference between two sweeps. Text a user controls (a command
line, a cgroup file) leaves the host framed (in hex, hosts/framing.py); hosts/probe.py parses
the answer.
"""

from __future__ import annotations

import functools
import shlex

from .framing import HEX_AWK
from .vendors import Vendor, default_vendor

MARK = "@@gpuhive:"
# Owners come from `ps`, run only for GPU processes this loop has not seen before - a process
# is known by its PID and start time (/proc/PID/stat, read by the shell), and the loop keeps
# the `ps` line of each until the process leaves the GPUs. (A process that changes its user or
# process group after it was first seen keeps its first line; GPU jobs do not do that.)
# A new GPU process that runs in a container (its /proc/PID/cgroup names docker or libpod) has
# that file after its `ps` line, framed like its command line: one line, '=x' and the file's
# hex (a user names cgroups below her delegated subtree), kept with the `ps` line
# (hosts/containers.py reads it). The awk that frames the command line reads it.
# printf, not echo: dash's echo would rewrite backslashes in process names; `set -f`: no
# pathname expansion of process arguments; only all-digit PIDs ever reach `eval`.
_HOST_TEMPLATE = r"""
printf '%s\n' "@M@ps 0"; new=; keys=
for p in $pids; do
  case $p in *[!0-9]*) continue ;; esac
  read -r s 2>/dev/null </proc/$p/stat || continue
  set -- ${s##*) }; k=c_${p}_${20}
  case " $keys " in *" $k "*) continue ;; esac
  keys="$keys $k"; eval "v=\${$k-}"
  if [ -n "$v" ]; then printf '%s\n' "$v"; else new="$new,$p"; eval "s_$p=$k"; fi
done
if [ -n "$new" ]; then
  out=$(ps -ww -o pid=,pgid=,uid=,user:64=,args= -p "${new#,}" </dev/null | LC_ALL=C awk '@PSAWK@')
  k=; while IFS= read -r x; do
    case $x in =x*) [ -n "$k" ] && eval "$k=\${$k}\$nl\$x" && printf '%s\n' "$x"; continue ;; esac
    k=; set -- $x; case $1 in ''|*[!0-9]*) continue ;; esac; eval "k=\${s_$1-}"
    [ -z "$k" ] || { eval "$k=\$x"; unset "s_$1"; printf '%s\n' "$x"; }
  done <<PS
$out
PS
fi
for k in $old; do case " $keys " in *" $k "*) ;; *) unset "$k" ;; esac; done; old=$keys
read -r c </proc/stat
printf '%s\n' "@M@stat 0" "$c" "@M@mem 0"
while read -r k x; do
  case $k in MemTotal:|MemAvailable:) printf '%s\n' "$k $x" ;; esac
  case $k in MemAvailable:) break ;; esac
done </proc/meminfo
n=; read -r on </sys/devices/system/cpu/online && {
  n=0; f=$IFS; IFS=,
  for r in $on; do case $r in *-*) n=$((n + ${r#*-} - ${r%-*} + 1)) ;; *) n=$((n + 1)) ;; esac; done
  IFS=$f
}
printf '%s\n' "@M@ncpu 0" "$n"
"""
# The owners' `ps` lines leave the host framed: PID, process group, uid and user name as ps
# prints them (none of them a user can write), then the command line in hex behind an 'x'
# (LC_ALL=C: byte by byte), then, in a container, its cgroup file framed the same way (`cg`,
# hosts/framing.py). No byte a user put in their arguments or cgroup names can be read as a
# line, a section mark, a separator or a driver's sentence; `_owners` decodes the command
# line for display only.
PS_AWK = HEX_AWK + (
    '{ s = $0; f = ""\n'
    '  for (k = 0; k < 4; k++) { sub(/^[ \\t]+/, "", s); i = index(s " ", " ")\n'
    '    f = f substr(s, 1, i - 1) " "; s = substr(s, i + 1) }\n'
    '  sub(/^[ \\t]+/, "", s); print f "x" hex(s); cg($1, 0) }'
)


def _body(vendor: Vendor, health: bool) -> str:
    return (
        f"{vendor.probe_body(health).strip()}\n{_HOST_TEMPLATE.strip()}"
        .replace("@PSAWK@", PS_AWK)
        .replace("@M@", MARK)
    )  # fmt: skip


def _scratch(vendor: Vendor) -> str:
    """A private scratch folder (mktemp; else a fresh 0700 one) with the vendor's FIFOs; no
    globbing. Leaving early (the client gave up; its session is gone) ends the vendor's
    children still running and removes the folder."""
    fifos = " ".join(f'"$t/{name}"' for name in vendor.fifos)
    make = f'mkfifo {fifos} || {{ rm -rf "$t"; exit 1; }}\n' if fifos else ""
    kill = f"kill {vendor.children} 2>/dev/null; " if vendor.children else ""
    return (
        f"set -f; old= have= nl='\n'\n{vendor.probe_setup()}\n"
        "t=$(mktemp -d 2>/dev/null) ||\n"
        '  { t=/tmp/gpuhive.$$.$(date +%s); mkdir -m 700 "$t" || exit 1; }\n'
        f"{make}trap '{kill}rm -rf \"$t\"' EXIT\ntrap 'exit 129' HUP INT TERM PIPE"
    )


@functools.cache
def probe_command(vendor: Vendor | None = None, health: bool = True) -> str:
    """One probe, one session: `sh -c` with the probe and clean-up (without `health`: the
    vendor's lighter probe, for frequent probes of a few hosts where only processes matter)."""
    vendor = vendor or default_vendor()
    return "sh -c " + shlex.quote(f"{_scratch(vendor)}\n{_body(vendor, health)}")


# The same probe as a loop on one long-lived session per host: each line read from stdin
# (a token) runs the probe once and ends its answer with `END <token>`. The scratch folder is
# made once and removed when the session ends; stderr joins stdout (nobody reads it apart, and
# an unread stream would stall the channel).
END = f"{MARK}end "


@functools.cache
def probe_loop_command(health: bool = True, vendor: Vendor | None = None) -> str:
    """The probe loop; without `health`, the vendor's lighter probe.

    Each request line is a token and, optionally, what the client holds of earlier answers
    (`HostPool.ask`'s `say`, from `Vendor.held`; only digits and dots are taken)."""
    vendor = vendor or default_vendor()
    loop = (
        "hid=$$.$(date +%s)\nwhile read -r token have; do\ncase $have in *[!0-9.]*) have= ;; esac\n"
        f"{_body(vendor, health)}\nprintf '%s\\n' \"{END}$token\"\ndone"
    )
    return "sh -c " + shlex.quote(f"{_scratch(vendor)}\nexec 2>&1\n{loop}")


PROBE_COMMAND = probe_command()
LIGHT_PROBE_COMMAND = probe_command(health=False)
PROBE_LOOP_COMMAND = probe_loop_command()
