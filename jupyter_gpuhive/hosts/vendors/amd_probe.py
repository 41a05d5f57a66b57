"""AMD's part of the probe: amd-smi (ROCm 6) or, where it is missing, rocm-smi (ROCm 5).

One probe session learns once which tool the host has (`$am`) and asks amd-smi's `static`
(names, ASIC serials, VRAM size, power limits: none of them changes while the driver is
loaded) on its first sweep only, keeping the answer. Every sweep then runs `amd-smi metric`
(activity, VRAM, power, temperatures, RAS/ECC counts, throttling) and `amd-smi process` at
once, each answering into a FIFO of the scratch folder, so a sweep starts amd-smi twice.
A rocm-smi host is asked once per sweep, with `--showpids`.

Process names are text a user controls. amd-smi and rocm-smi print JSON, whose strings hold
no raw newline, but the process sections are still sent with every line behind a '|' (none
can pass for a section mark), and a PID is taken only from a line that is a `"pid": N` key
of amd-smi's indented JSON, or a `"PID<n>": "` key of rocm-smi's (a name's quotes are
escaped, so a name can forge neither). amd_read.py reads the sections this writes.
"""

from __future__ import annotations

STATIC_QUERY = "amd-smi static --asic --bus --vram --limit --json"
METRIC_QUERY = "amd-smi metric --usage --power --temperature --mem-usage --ecc --json"
# An amd-smi that refuses one of those options (argparse: status 2) is asked for every metric.
METRIC_ALL = "amd-smi metric --json"
PROCESS_QUERY = "amd-smi process --json"
LIST_QUERY = "amd-smi list --json"
TOPOLOGY_QUERY = "amd-smi topology --json"
ROCM_QUERY = (
    "rocm-smi --showuniqueid --showproductname --showbus --showuse --showmemuse "
    "--showmeminfo vram --showtemp --showpower --showpids --json"
)
ROCM_TOPOLOGY_QUERY = "rocm-smi --showtopotype --json"
SECTIONS = ("amdstatic", "amdmetric", "amdprocess", "rocmsmi")

SETUP = "m= p= as= ss=1 am=\ncommand -v amd-smi >/dev/null 2>&1 && am=1"
FIFOS = ("m", "p")
CHILDREN = "$m $p"

_BODY = r"""
if [ -n "$am" ]; then
  @METRIC@ >"$t/m" 2>&1 </dev/null & m=$!
  @PROCESS@ >"$t/p" 2>&1 </dev/null & p=$!
  exec 3<"$t/m" 4<"$t/p"
  if [ "$ss" != 0 ]; then as=$(@STATIC@ 2>&1 </dev/null); ss=$?; fi
  printf '%s\n' "@M@amdstatic $ss" "$as"
  out=
  while IFS= read -r x || [ -n "$x" ]; do out="$out$x
"; done <&3
  exec 3<&-; wait $m; st=$?; m=
  case $st:$out in 2:*'unrecognized arguments'*|2:*'invalid choice'*)
    out="$(@METRIC0@ 2>&1 </dev/null)
"; st=$? ;; esac
  printf '%s\n' "@M@amdmetric $st"; printf '%s' "$out"
  out=; pids=
  while IFS= read -r x || [ -n "$x" ]; do
    out="$out|$x
"; y=${x#"${x%%[! ]*}"}
    case $y in '"pid": '[0-9]*) y=${y#'"pid": '}; pids="$pids ${y%%[!0-9]*}" ;; esac
  done <&4
  exec 4<&-; wait $p; st=$?; p=; printf '%s\n' "@M@amdprocess $st"; printf '%s' "$out"
else
  out=$(@ROCM@ 2>&1 </dev/null); st=$?; pids=
  printf '%s\n' "@M@rocmsmi $st"
  while IFS= read -r x || [ -n "$x" ]; do
    printf '|%s\n' "$x"; r=$x
    while :; do
      case $r in *'"PID'[0-9]*) r=${r#*'"PID'}; y=${r%%[!0-9]*}
        case $r in "$y"'": "'*) pids="$pids $y" ;; esac ;;
      *) break ;; esac
    done
  done <<ROCM
$out
ROCM
fi
"""


def body() -> str:
    """The AMD part of one probe (`@M@` marks its sections; it leaves the GPU processes'
    PIDs in `$pids`)."""
    return (
        _BODY.strip()
        .replace("@METRIC@", METRIC_QUERY)
        .replace("@METRIC0@", METRIC_ALL)
        .replace("@PROCESS@", PROCESS_QUERY)
        .replace("@STATIC@", STATIC_QUERY)
        .replace("@ROCM@", ROCM_QUERY)
    )


# What the doctor runs alone: (check name, saved file, command).
QUERIES = (
    ("amd-smi version", "amd-smi-version.txt", "amd-smi version"),
    ("amd-smi static", "amd-smi-static.json", STATIC_QUERY),
    ("amd-smi metric", "amd-smi-metric.json", METRIC_QUERY),
    ("amd-smi process", "amd-smi-process.json", PROCESS_QUERY),
    ("amd-smi topology", "amd-smi-topology.json", TOPOLOGY_QUERY),
)
ROCM_QUERIES = (("rocm-smi", "rocm-smi.json", ROCM_QUERY),)
# The topology: amd-smi's, else rocm-smi's link types.
TOPOLOGY = (
    f"if command -v amd-smi >/dev/null 2>&1; then exec {TOPOLOGY_QUERY}; "
    f"else exec {ROCM_TOPOLOGY_QUERY}; fi"
)
FIND = 'command -v amd-smi || command -v rocm-smi || { echo "PATH=$PATH"; exit 127; }'
