"""NVIDIA's part of the probe: the nvidia-smi queries it runs, as shell for one probe session.

It asks nvidia-smi three things at once (GPU metrics, compute processes, GPU health) and the
GPU and MIG list where MIG is on; the host-generic probe (hosts/probe_command.py) adds the
owners (`ps`), CPU and memory. nvidia_read.py reads the sections this writes.
"""

from __future__ import annotations

from .nvidia_smi import QUERY_APPS_FIELDS, QUERY_GPU_FIELDS

# The sections of nvidia-smi's own output that hold no text a user writes: only there is a
# driver's sentence one (`-q -x` holds process names: a lost GPU's line is only removed there).
NVSMI_SECTIONS = ("gpus", "apps", "list", "health")

GPU_FIELDS = (*QUERY_GPU_FIELDS, "mig.mode.current")
# Every driver knows these (the GPU's identity); the others are asked only where the host's
# `nvidia-smi --help-query-gpu` lists them (read once per probe session: `$hf`), so a field a
# driver lacks (`mig.mode.current` before R450) costs that field, never the whole query.
# Where the host lists nothing, a field it refuses (`Field "x" is not a valid field to query.`)
# is left out and the query asked again (4 times at most, then the base fields only), and
# the session keeps asking without it.
BASE_FIELDS = ("index", "uuid", "name", "memory.used", "memory.total")
HELP_QUERY = "nvidia-smi --help-query-gpu"
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
# starts nvidia-smi three times per probe, at once, and nothing more than
# the generic probe's `ps` for the PIDs this leaves in `$pids`.
# The XML holds process names as nvidia-smi prints them (newlines too): each of its lines is
# sent behind a '|', so none can pass for a section mark.
# printf, not echo: dash's echo would rewrite backslashes in process names; `set -f`: no
# pathname expansion of process arguments; only all-digit PIDs ever reach `eval`.
_GPU_TEMPLATE = r"""
$gq >"$t/g" 2>&1 </dev/null & g=$!
@APPSQ@ >"$t/a" 2>&1 </dev/null & a=$!
@XSTART@
out=; mig=
while IFS= read -r x || [ -n "$x" ]; do
  out="$out$x
"; case $x in *', Enabled'*) mig=1 ;; esac
done <&3
exec 3<&-; wait $g; st=$?; g=
gn=0
while :; do case $out in *' is not a valid field to query.'*) ;; *) break ;; esac
  gf=${out#*Field ?}; gf=${gf%%[!A-Za-z0-9_.]*}; gn=$((gn + 1))
  case $gq in *",$gf "*|*",$gf,"*) ;; *) gn=9 ;; esac
  if [ $gn -gt 4 ]; then [ "$gq" = "$gq0" ] && break; gq=$gq0
  else gp=${gq%%",$gf"[, ]*}; gq="$gp${gq#"$gp,$gf"}"; fi
  out="$($gq 2>&1 </dev/null)
"; st=$?
done
printf '%s\n' "@M@gpus $st"; printf '%s' "$out"
out=; pids=
while IFS= read -r x || [ -n "$x" ]; do
  out="$out$x
"; case $x in [0-9]*,*) pids="$pids ${x%%,*}" ;; esac
done <&4
exec 4<&-; wait $a; st=$?; a=; printf '%s\n' "@M@apps $st"; printf '%s' "$out"
if [ -n "$mig" ]; then out=$(@LISTQ@ 2>&1 </dev/null); ls=$?; else out=; ls=0; fi
printf '%s\n' "@M@list $ls"; [ -z "$out" ] || printf '%s\n' "$out"
@XREAD@
"""
# Health (nvidia_health.py) comes from a third `--query-gpu` (ECC, retired pages, remapped rows,
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


def body(health: bool) -> str:
    """The nvidia-smi part of one probe (`@M@` marks its sections; it leaves the GPU
    processes' PIDs in `$pids`); without `health`, `-q -x` runs only on MIG hosts."""
    start, read = _HEALTH if health else ('exec 3<"$t/g" 4<"$t/a"', "")
    return (
        _GPU_TEMPLATE.strip()
        .replace("@XSTART@", start)
        .replace("@XREAD@", f"{read}\n{_XML_FOR_MIG}".strip())
        .replace("@APPSQ@", APPS_QUERY)
        .replace("@LISTQ@", LIST_QUERY)
        .replace("@XMLQ@", XML_QUERY)
    )


# The session's variables and FIFOs (in the scratch folder `$t`), and the children to end when
# the session leaves early (the client gave up): an nvidia-smi still running or waiting to
# open its FIFO.
def _known(fields: tuple[str, ...]) -> str:
    """Shell words: ',FIELD' for each of `fields` the host's nvidia-smi lists in `$hf`."""
    return f"$(kf {' '.join(fields)})"


def _query(fields: str) -> str:
    return f"nvidia-smi --query-gpu={fields} --format=csv,nounits"


_OPTIONAL = tuple(f for f in GPU_FIELDS if f not in BASE_FIELDS)
# The host's field list (`$hf`) and `kf`, which prints ',FIELD' for each of "$@" it lists (all
# of them when it listed none): the probe session's and the doctor's query ask only those.
KNOWN_FIELDS = (
    f"hf=$({HELP_QUERY} 2>/dev/null </dev/null) || hf=\n"
    'kf() { o=; for f in "$@"; do case $hf in \'\'|*"\\"$f\\""*) o="$o,$f" ;; esac; done;'
    " printf '%s' \"$o\"; }\n"
)
# The metrics query alone, as a probe session asks it of this host (`jupyter gpuhive doctor`).
GPU_QUERY_KNOWN = f"{KNOWN_FIELDS}exec {_query(','.join(BASE_FIELDS) + _known(_OPTIONAL))}"
SETUP = (
    "g= a= q= h= hprev= hv=0 hid=$$\n"
    f"{KNOWN_FIELDS}"
    f'gq0="{_query(",".join(BASE_FIELDS))}"\n'
    f'gq="{_query(",".join(BASE_FIELDS) + _known(_OPTIONAL))}"\n'
    f'hq="{_query("uuid" + _known(HEALTH_FIELDS[1:] + ROW_FIELDS))}"\n'
    f'hq0="{_query("uuid" + _known(HEALTH_FIELDS[1:]))}"'
)
FIFOS = ("g", "a", "x")
CHILDREN = "$g $a $q"
