"""The probe's remote command: ONE shell command per host per sweep (or one loop per host).

It asks nvidia-smi three things at once (GPU metrics, compute processes, GPU health), the GPU
and MIG list where MIG is on, resolves the owners of the GPU processes with one `ps`, and reads
CPU and memory counters from /proc. It never sleeps: CPU utilisation comes from the difference
between two sweeps. Text a user controls (a command line, a cgroup file) leaves the host framed
(in hex, hosts/framing.py); hosts/probe.py parses the answer.
"""

from __future__ import annotations

import shlex

from .framing import HEX_AWK
from .nvsmi import QUERY_APPS_FIELDS, QUERY_GPU_FIELDS

MARK = "@@gpuhive:"
# The sections of nvidia-smi's own output that hold no text a user writes: only there is a
# driver's sentence one (`-q -x` holds process names: a lost GPU's line is only removed there).
NVSMI_SECTIONS = ("gpus", "apps", "list", "health")

GPU_FIELDS = (*QUERY_GPU_FIELDS, "mig.mode.current")
# Every nvidia-smi query the probe runs, by name (`jupyter gpuhive doctor` runs each alone).
GPU_QUERY = f"nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv,nounits"
APPS_QUERY = f"nvidia-smi --query-compute-apps={','.join(QUERY_APPS_FIELDS)} --format=csv,nounits"
LIST_QUERY = "nvidia-smi -L"
XML_QUERY = "nvidia-smi -q -x"

# nvidia-smi is asked twice in parallel (metrics, processes), each answering into a FIFO (no
# file is written: on a real disk that is journal work on every sweep). Both FIFOs are opened
# for reading at once: a writer's open blocks until then, and nvidia-smi only starts after it
# (opened one after the other, the second call would wait for the first). `-L` (MIG slice UUIDs
# and profiles) only runs when a GPU reports MIG mode enabled; `-q -x` (health: ECC, retired
# pages, remapped rows, slowdown reasons and thresholds; with MIG each slice's GPU/compute instance
# and memory, and which slice each process runs on) runs in parallel with the two queries through a
# third FIFO. Everything else is shell builtins (read loops, case, printf, eval), so a plain host
# starts nvidia-smi three times per probe, at once, and nothing more:
# owners come from `ps`, run only for GPU processes this loop has not seen before - a process
# is known by its PID and start time (/proc/PID/stat, read by the shell), and the loop keeps
# the `ps` line of each until the process leaves the GPUs. (A process that changes its user or
# process group after it was first seen keeps its first line; GPU jobs do not do that.)
# The XML holds process names as nvidia-smi prints them (newlines too): each of its lines is
# sent behind a '|', so none can pass for a section mark.
# A new GPU process that runs in a container (its /proc/PID/cgroup names docker or libpod) has
# that file after its `ps` line, framed like its command line: one line, '=x' and the file's
# hex (a user names cgroups below her delegated subtree), kept with the `ps` line
# (hosts/containers.py reads it). The awk that frames the command line reads it.
# printf, not echo: dash's echo would rewrite backslashes in process names; `set -f`: no
# pathname expansion of process arguments; only all-digit PIDs ever reach `eval`.
_BODY_TEMPLATE = r"""
@GPUQ@ >"$t/g" 2>&1 </dev/null & g=$!
@APPSQ@ >"$t/a" 2>&1 </dev/null & a=$!
@XSTART@
out=; mig=
while IFS= read -r x || [ -n "$x" ]; do
  out="$out$x
"; case $x in *', Enabled'*) mig=1 ;; esac
done <&3
exec 3<&-; wait $g; st=$?; g=; printf '%s\n' "@M@gpus $st"; printf '%s' "$out"
out=; pids=
while IFS= read -r x || [ -n "$x" ]; do
  out="$out$x
"; case $x in [0-9]*,*) pids="$pids ${x%%,*}" ;; esac
done <&4
exec 4<&-; wait $a; st=$?; a=; printf '%s\n' "@M@apps $st"; printf '%s' "$out"
if [ -n "$mig" ]; then out=$(@LISTQ@ 2>&1 </dev/null); ls=$?; else out=; ls=0; fi
printf '%s\n' "@M@list $ls"; [ -z "$out" ] || printf '%s\n' "$out"
@XREAD@
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
# Health (hosts/health.py) comes from a third `--query-gpu` (ECC, retired pages, remapped rows,
# thermal slowdown reasons): fields the driver fills, never a process name. It runs on every
# probe, in parallel with the two others through a third FIFO; drivers that do not know
# `remapped_rows.*` (an unknown field fails the whole query) get the query without them, for
# the rest of the loop. Its lines change only when something happens to a GPU, so they are
# kept as version "$hid.$hv" of this loop (a new loop, a new $hid): the client names the
# version it holds after its token, and when that is the current one the answer is the
# `healthsame` mark and the version, no lines. The client holds what it was sent, so "same" is
# never a guess.
# What an older driver answers to `remapped_rows.*` (a shell pattern): ask without them.
OLD_DRIVER = "*remapped_rows.*valid*"
_HEALTH = (
    '$hq >"$t/x" 2>&1 </dev/null & q=$!\nexec 3<"$t/g" 4<"$t/a" 5<"$t/x"',
    'h=\nwhile IFS= read -r x || [ -n "$x" ]; do h="$h$x\n"; done <&5\n'
    "exec 5<&-; wait $q; st=$?; q=\n"
    f'case $h in {OLD_DRIVER}) if [ "$hq" != "$hq0" ]; then\n'
    "  hq=$hq0; h=$($hq 2>&1 </dev/null); st=$?; fi ;; esac\n"
    'if [ "$h" != "$hprev" ]; then hv=$((hv + 1)); hprev=$h; fi\n'
    'if [ "$st" = 0 ] && [ "$have" = "$hid.$hv" ]; then\n'
    '  printf \'%s\\n\' "@M@healthsame 0" "$hid.$hv"\n'
    "else\n"
    '  printf \'%s\\n\' "@M@health $st"; [ -z "$h" ] || printf \'%s\\n\' "$h"\n'
    '  printf \'%s\\n\' "@M@healthv 0" "$hid.$hv"\n'
    "fi",
)
# `-q -x` only where MIG is on, after the others: the slices' GPU/compute instances and memory,
# and which slice each process runs on. It carries process names (nvidia-smi may not escape
# them), so each line is sent behind a '|' (none can pass for a section mark), and only the
# slices and placements are read from it (`_slices`), under rules a name cannot pass
# (`trusted_processes`); never health.
_XML_FOR_MIG = (
    'if [ -n "$mig" ]; then\n'
    "  out=$(@XMLQ@ 2>&1 </dev/null); ls=$?; printf '%s\\n' \"@M@xml 0\"\n"
    "  while IFS= read -r x; do printf '|%s\\n' \"$x\"; done <<XML\n$out\nXML\n"
    "  printf '%s\\n' \"@M@xmlst $ls\"\nfi"
)
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
# The health query's fields; `remapped_rows.*` only where the driver knows them.
HEALTH_FIELDS = (
    "uuid",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending",
    "retired_pages.double_bit.count",
    "retired_pages.single_bit_ecc.count",
    "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown",
)
ROW_FIELDS = ("remapped_rows.pending", "remapped_rows.failure")
HEALTH_QUERY = f"nvidia-smi --query-gpu={','.join(HEALTH_FIELDS + ROW_FIELDS)} --format=csv,nounits"
HEALTH_QUERY_OLD = f"nvidia-smi --query-gpu={','.join(HEALTH_FIELDS)} --format=csv,nounits"
# The health query once, asked again without `remapped_rows.*` where the driver does not know
# them (`jupyter gpuhive doctor`; the probe's loop remembers which one the host takes).
HEALTH_ONCE = (
    f"h=$({HEALTH_QUERY} 2>&1); st=$?; case $h in {OLD_DRIVER}) exec {HEALTH_QUERY_OLD} 2>&1 ;; "
    "esac; printf '%s\\n' \"$h\"; exit $st"
)


def _body(health: bool) -> str:
    start, read = _HEALTH if health else ('exec 3<"$t/g" 4<"$t/a"', "")
    return (
        _BODY_TEMPLATE.strip()
        .replace("@XSTART@", start)
        .replace("@XREAD@", f"{read}\n{_XML_FOR_MIG}".strip())
        .replace("@GPUQ@", GPU_QUERY)
        .replace("@APPSQ@", APPS_QUERY)
        .replace("@LISTQ@", LIST_QUERY)
        .replace("@XMLQ@", XML_QUERY)
        .replace("@PSAWK@", PS_AWK)
        .replace("@M@", MARK)
    )


# A private scratch folder (mktemp; else a fresh 0700 one) with the two FIFOs; no globbing.
_SCRATCH = (
    "set -f; old= g= a= q= h= hprev= have= hv=0 hid=$$ nl='\n'\n"
    f"hq={shlex.quote(HEALTH_QUERY)} hq0={shlex.quote(HEALTH_QUERY_OLD)}\n"
    "t=$(mktemp -d 2>/dev/null) ||\n"
    '  { t=/tmp/gpuhive.$$.$(date +%s); mkdir -m 700 "$t" || exit 1; }\n'
    'mkfifo "$t/g" "$t/a" "$t/x" || { rm -rf "$t"; exit 1; }\n'
    # Leaving early (the client gave up; its session is gone) ends the nvidia-smi still
    # running or waiting to open its FIFO, and removes the folder.
    "trap 'kill $g $a $q 2>/dev/null; rm -rf \"$t\"' EXIT\ntrap 'exit 129' HUP INT TERM PIPE"
)

_BODY = _body(health=True)
# One probe, one session: `sh -c` with the probe and clean-up.
PROBE_COMMAND = "sh -c " + shlex.quote(f"{_SCRATCH}\n{_BODY}")
# The same without the health query (`-q -x` only on MIG hosts): for frequent probes of a
# few hosts (preemption's watch of lent GPUs), where only processes matter.
LIGHT_PROBE_COMMAND = "sh -c " + shlex.quote(f"{_SCRATCH}\n{_body(health=False)}")

# The same probe as a loop on one long-lived session per host: each line read from stdin
# (a token) runs the probe once and ends its answer with `END <token>`. The scratch folder is
# made once and removed when the session ends; stderr joins stdout (nobody reads it apart, and
# an unread stream would stall the channel).
END = f"{MARK}end "


def probe_loop_command(health: bool = True) -> str:
    """The probe loop; without `health`, `-q -x` runs only on MIG hosts (the old probe).

    Each request line is a token and, optionally, the version of the health lines the client
    holds (`HostPool.ask`'s `say`; only digits and dots are taken)."""
    loop = (
        "hid=$$.$(date +%s)\nwhile read -r token have; do\ncase $have in *[!0-9.]*) have= ;; esac\n"
        f"{_body(health)}\nprintf '%s\\n' \"{END}$token\"\ndone"
    )
    return "sh -c " + shlex.quote(f"{_SCRATCH}\nexec 2>&1\n{loop}")


PROBE_LOOP_COMMAND = probe_loop_command()
