"""The probe: ONE remote command per host per sweep, and the parsing of its answer.

The command asks nvidia-smi three things at once (GPU metrics, compute processes, the GPU
and MIG list), resolves the owners of the GPU processes with one `ps`, and reads CPU and
memory counters from /proc. It never sleeps: CPU utilisation comes from the difference
between two sweeps.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from datetime import datetime

from .containers import Container, cgroups_after_ps, container_of
from .health import Health, lost_gpus, parse_health, without_lost
from .nvsmi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    GpuListing,
    GpuMetrics,
    GpuProcess,
    MigDevice,
    NvsmiParseError,
    NvsmiReport,
    check_driver,
    parse_compute_apps,
    parse_gpu_list,
    parse_query_gpu,
    parse_query_xml,
)

MARK = "@@gpuhive:"

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
# that file's lines after its `ps` line, each behind a '=' (a `ps` line starts with its PID),
# kept with it like the `ps` line (hosts/containers.py reads them).
# printf, not echo: dash's echo would rewrite backslashes in process names; `set -f`: no
# pathname expansion of process arguments; only all-digit PIDs ever reach `eval`.
_BODY_TEMPLATE = r"""
cg() { y=; c=; while IFS= read -r l; do y="$y
=$l"; case $l in *docker*|*libpod*) c=1 ;; esac; done 2>/dev/null </proc/$1/cgroup
[ -z "$c" ] || x="$x$y"; }
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
  out=$(ps -ww -o pid=,pgid=,user:64=,args= -p "${new#,}" </dev/null)
  while IFS= read -r x; do
    set -- $x; case $1 in ''|*[!0-9]*) continue ;; esac; eval "k=\${s_$1-}"
    [ -z "$k" ] || { cg "$1"; eval "$k=\$x"; unset "s_$1"; printf '%s\n' "$x"; }
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
# Health (hosts/health.py): `-q -x` on every probe, in parallel with the two queries through a
# third FIFO; its lines are sent behind a '|', its exit status after them. Without MIG only the
# lines health reads leave the host (`HEALTH_LINES`, by awk: nvidia-smi prints one element per
# line): a fifth of the XML or less, no process names, and nothing that changes from sweep to
# sweep on a healthy GPU (the temperature comes with the CSV query), so hosts/health.py keeps
# its reading of an unchanged text. With MIG the whole XML (slices).
HEALTH_LINES = (
    r"^[ \t]*<\/?([?]xml|(nvidia_smi_log|gpu|ecc_errors|volatile|aggregate|double_bit|"
    r"retired_pages|double_bit_retirement|multiple_single_bit_retirement|remapped_rows|"
    r"clocks_event_reasons|clocks_throttle_reasons|temperature)[ >]|"
    r"(attached_gpus|uuid|total|retired_count|pending_retirement|pending_blacklist|"
    r"remapped_row_pending|remapped_row_failure)>|(sram|dram)_uncorrectable>|"
    r"clocks_[a-z_]*thermal|gpu_temp_slow_threshold>)|"
    r"Unable to determine the device handle"
)
# The lines are kept as version "$hid.$hv" of this loop (a new loop, a new $hid). The client
# names the version it holds after its token; when that is the current one and no GPU is in
# MIG mode, the answer is the `xmlsame` mark and the version, no XML: a healthy host sends
# its health lines once. The client holds what it was sent, so "same" is never a guess.
# The awk program (no single quote in it): every line behind a '|' where `all` is set (MIG),
# else only the health lines, without their indentation.
HEALTH_AWK = (
    'all != "" { print "|" $0; next }\n'
    f'  /{HEALTH_LINES}/ {{ sub(/^[ \\t]+/, ""); print "|" $0 }}'
)
_XML_ALWAYS = (
    '@XMLQ@ >"$t/x" 2>&1 </dev/null & q=$!\nexec 3<"$t/g" 4<"$t/a" 5<"$t/x"',
    "h=$(awk -v all=\"$mig\" '@AWK@' <&5)\n"
    "exec 5<&-; wait $q; st=$?; q=\n"
    'if [ -n "$mig" ] || [ "$h" != "$hprev" ]; then hv=$((hv + 1)); hprev=$h; fi\n'
    'if [ -z "$mig" ] && [ "$have" = "$hid.$hv" ]; then\n'
    '  printf \'%s\\n\' "@M@xmlsame 0" "$hid.$hv"\n'
    "else\n"
    '  printf \'%s\\n\' "@M@xml 0"; [ -z "$h" ] || printf \'%s\\n\' "$h"\n'
    '  printf \'%s\\n\' "@M@xmlv 0" "$hid.$hv"\n'
    "fi\n"
    "printf '%s\\n' \"@M@xmlst $st\"",
)
# Without health (the benchmark's baseline): `-q -x` only where MIG is on, after the others.
_XML_FOR_MIG = (
    'exec 3<"$t/g" 4<"$t/a"',
    'if [ -n "$mig" ]; then\n'
    "  out=$(@XMLQ@ 2>&1 </dev/null); ls=$?; printf '%s\\n' \"@M@xml 0\"\n"
    "  while IFS= read -r x; do printf '|%s\\n' \"$x\"; done <<XML\n$out\nXML\n"
    "  printf '%s\\n' \"@M@xmlst $ls\"\nfi",
)


def _body(health: bool) -> str:
    start, read = _XML_ALWAYS if health else _XML_FOR_MIG
    return (
        _BODY_TEMPLATE.strip()
        .replace("@XSTART@", start)
        .replace("@XREAD@", read)
        .replace("@GPUQ@", GPU_QUERY)
        .replace("@APPSQ@", APPS_QUERY)
        .replace("@LISTQ@", LIST_QUERY)
        .replace("@XMLQ@", XML_QUERY)
        .replace("@AWK@", HEALTH_AWK)
        .replace("@M@", MARK)
    )


# A private scratch folder (mktemp; else a fresh 0700 one) with the two FIFOs; no globbing.
_SCRATCH = (
    "set -f; old= g= a= q= h= hprev= have= hv=0 hid=$$\n"
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
_SECTION = re.compile(rf"{re.escape(MARK)}(\w+) (\d+)")
_NL_MARK = f"\n{MARK}"
_CR = re.compile(r"\r$", re.MULTILINE)
_PROCESS_NAME = re.compile(r"<process_name>.*?</process_name>", re.DOTALL)


@dataclass(frozen=True)
class ProcessInfo:
    """A GPU compute process with its owner (a UNIX user) and command line."""

    pid: int
    gpu_uuid: str | None  # the physical GPU's (nvidia-smi reports the parent of a MIG slice)
    user: str | None
    command: str
    used_memory_mib: int | None
    pgid: int | None = None  # process group: tells a gpuhive job's processes apart
    mig_uuid: str | None = None  # the MIG slice it runs on, where MIG is on
    container: Container | None = None  # the container it runs in (hosts/containers.py)


@dataclass(frozen=True)
class HostSample:
    """What one probe of one host found."""

    host: str
    taken_at: datetime
    gpus: tuple[GpuMetrics, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    mig_uuids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # physical GPU UUID -> its MIG slices (uuid, profile, GI/CI, memory), from -L and -q -x
    slices: dict[str, tuple[MigDevice, ...]] = field(default_factory=dict)
    gpu_error: str | None = None
    cpu_jiffies: tuple[int, int] | None = None  # (busy, total) since boot
    cpu_count: int | None = None
    mem_total_mib: int | None = None
    mem_available_mib: int | None = None
    health: dict[str, Health] = field(default_factory=dict)  # GPU UUID -> from -q -x
    lost: tuple[tuple[str, str], ...] = ()  # (PCI bus id, message) of GPUs nvidia-smi lost


def without_process_names(text: str) -> str:
    """``-q -x`` output with every process name emptied: nvidia-smi does not always escape
    them, and a name must not break the XML or pass for a driver failure."""
    return _PROCESS_NAME.sub("<process_name></process_name>", text)


def split_sections(text: str) -> dict[str, tuple[int, str]]:
    """The probe's answer as {section: (exit status, text)}; lines end at "\n" only."""
    if "\r" in text:  # a line's trailing CR is not part of it
        text = _CR.sub("", text)
    starts = [0] if text.startswith(MARK) else []  # lines that may be marks: str.find, no
    at = text.find(_NL_MARK)  # loop over the XML's many lines
    while at >= 0:
        starts.append(at + 1)
        at = text.find(_NL_MARK, at + 1)
    marks = []
    for at in starts:
        stop = text.find("\n", at)
        match = _SECTION.fullmatch(text, at, len(text) if stop < 0 else stop)
        if match:
            marks.append(match)
    sections: dict[str, tuple[int, str]] = {}
    for k, match in enumerate(marks):
        end = marks[k + 1].start() - 1 if k + 1 < len(marks) else len(text)
        body = text[match.end() + 1 : end] if match.end() < end else ""
        sections[match.group(1)] = (int(match.group(2)), body)
    return sections


def _health_lines(
    host: str, sections: dict[str, tuple[int, str]], seen: dict[str, tuple[str, str]] | None
) -> str:
    """The `-q -x` lines of this answer, or those it says are unchanged (see `parse_probe`)."""
    same = sections.get("xmlsame")
    if same is not None:
        version = same[1].strip()
        held = seen.get(host) if seen is not None else None
        if seen is None or held is None or held[0] != version:
            if seen is not None:  # not what was asked for: the next request asks afresh
                seen.pop(host, None)
            raise NvsmiParseError(f"the probe's health lines {version!r} are not known here")
        return held[1]
    xml = sections.get("xml", (1, ""))[1]
    xml = xml.removeprefix("|").replace("\n|", "\n")  # each line was sent behind a '|'
    version = sections.get("xmlv", (1, ""))[1].strip()
    if seen is not None:
        if version and "<processes>" not in xml:  # MIG hosts send all, every time
            seen[host] = (version, xml)
        else:
            seen.pop(host, None)
    return xml


def _owners(text: str) -> dict[int, tuple[str, str, int]]:
    """`ps -o pid=,pgid=,user=,args=` lines as {pid: (user, command, pgid)}.

    `ps` escapes control characters in arguments, so each process is one line; a PID that
    comes twice is nobody's (None is better than a forged owner).
    """
    owners: dict[int, tuple[str, str, int]] = {}
    twice: set[int] = set()
    for line in text.split("\n"):
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            pid = int(parts[0])
            if pid in owners:
                twice.add(pid)
            owners[pid] = (parts[2], parts[3] if len(parts) > 3 else "", int(parts[1]))
    return {pid: found for pid, found in owners.items() if pid not in twice}


def _cpu(text: str) -> tuple[int, int] | None:
    parts = text.split()
    if len(parts) < 5 or parts[0] != "cpu":
        return None
    values = [int(v) for v in parts[1:] if v.isdigit()]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])
    return total - idle, total


def _meminfo(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        number = rest.split()
        if number and number[0].isdigit():
            out[key.strip()] = int(number[0]) // 1024
    return out


def _placements(
    report: NvsmiReport, processes: list[ProcessInfo]
) -> dict[int, tuple[str, int | None, int | None]]:
    """{pid: (GPU, GI, CI)} from -q -x, for the processes the CSV put on that GPU; a PID the XML
    places twice is left out (a process name nvidia-smi did not escape could forge one)."""
    gpu_of = {p.pid: p.gpu_uuid for p in processes}
    claims: dict[int, list[GpuProcess]] = {}
    for proc in report.processes:
        if proc.pid in gpu_of and gpu_of[proc.pid] == proc.gpu_uuid:
            claims.setdefault(proc.pid, []).append(proc)
    return {
        pid: (found.gpu_uuid or "", found.gpu_instance_id, found.compute_instance_id)
        for pid, (found, *more) in claims.items()
        if not more
    }


def _slices(
    listings: list[GpuListing], report: NvsmiReport, processes: list[ProcessInfo]
) -> tuple[dict[str, tuple[MigDevice, ...]], list[ProcessInfo]]:
    """Join -L (UUID, profile by MIG device index) with -q -x (GI, CI, memory by the same
    index) per GPU, and put each process on its slice by (GPU, GI, CI)."""
    listed_gpus = [gpu.uuid for gpu in report.gpus]  # a GPU listed twice: slices unknown
    xml = {
        g.uuid: {m.index: m for m in g.mig} for g in report.gpus if listed_gpus.count(g.uuid) == 1
    }
    slices: dict[str, tuple[MigDevice, ...]] = {}
    where: dict[tuple[str, int | None, int | None], str] = {}
    for listing in listings:
        found = []
        for listed in listing.mig:
            seen = xml.get(listing.uuid, {}).get(listed.index)
            if seen is None or listed.uuid is None:
                continue
            device = replace(seen, uuid=listed.uuid, profile=listed.profile)
            found.append(device)
            where[(listing.uuid, seen.gpu_instance_id, seen.compute_instance_id)] = listed.uuid
        if found:
            slices[listing.uuid] = tuple(found)
    on_slice = {pid: where.get(place) for pid, place in _placements(report, processes).items()}
    placed = [
        replace(p, mig_uuid=on_slice.get(p.pid)) if p.gpu_uuid in slices else p for p in processes
    ]
    return slices, placed


def parse_probe(
    host: str, text: str, taken_at: datetime, seen: dict[str, tuple[str, str]] | None = None
) -> HostSample:
    """Turn the probe's answer into a HostSample; GPU trouble is reported, not raised.

    `seen` ({host: (version, health lines)}) is the caller's memory of the health lines each
    host's probe loop sent: an answer with the `xmlsame` mark refers to it (the version to
    send along with the next request is `seen[host][0]`); each answer with lines updates it."""
    sections = split_sections(text)
    if "gpus" not in sections:
        raise NvsmiParseError(f"the probe's answer has no GPU section: {text[:200]!r}")
    xml = _health_lines(host, sections, seen)
    gpu_error = None
    gpus: list[GpuMetrics] = []
    processes: list[ProcessInfo] = []
    mig: dict[str, tuple[str, ...]] = {}
    slices: dict[str, tuple[MigDevice, ...]] = {}
    listings: list[GpuListing] = []
    lost = lost_gpus("\n".join(body for _, body in sections.values()))
    if lost:  # a GPU nvidia-smi cannot reach: its line goes, the others' rows stay
        sections = {
            name: (0 if name in ("gpus", "apps", "list") else status, without_lost(body))
            for name, (status, body) in sections.items()
        }
    try:
        status, body = sections["gpus"]
        check_driver(body, status)
        gpus = parse_query_gpu(body)
        if not gpus:
            raise NvsmiParseError("nvidia-smi listed no GPUs")
        status, body = sections.get("apps", (0, ""))
        check_driver(body, status)
        ps = sections.get("ps", (0, ""))[1]
        owners = _owners(ps)
        cgroups = cgroups_after_ps(ps) if "\n=" in ps else {}
        for proc in parse_compute_apps(body):
            found = owners.get(proc.pid)
            user, command, pgid = found if found else (None, proc.process_name or "", None)
            cgroup = cgroups.get(proc.pid)
            processes.append(
                ProcessInfo(proc.pid, proc.gpu_uuid, user, command, proc.used_memory_mib, pgid,
                            container=container_of(cgroup) if cgroup and found else None)
            )  # fmt: skip
        status, body = sections.get("list", (1, ""))
        listings = parse_gpu_list(body) if status == 0 else []
        for listing in listings:
            if listing.mig:
                mig[listing.uuid] = tuple(m.uuid for m in listing.mig if m.uuid)
    except NvsmiParseError as error:
        gpu_error = str(error)
        gpus, processes, listings = [], [], []
    if "<process_name" in xml:
        xml = without_process_names(xml)
    health = (
        parse_health(xml, {g.uuid for g in gpus if g.uuid}, {g.uuid: g.temperature_c for g in gpus})
        if gpus
        else {}
    )
    if sections.get("xmlst", sections.get("xml", (1, "")))[0] == 0 and listings:
        try:  # unreadable XML costs the MIG slices' details, never the GPUs and processes
            slices, processes = _slices(listings, parse_query_xml(xml), processes)
        except NvsmiParseError:
            slices = {}
    memory = _meminfo(sections.get("mem", (0, ""))[1])
    ncpu = sections.get("ncpu", (0, ""))[1].strip()
    return HostSample(
        host=host,
        taken_at=taken_at,
        gpus=tuple(gpus),
        processes=tuple(processes),
        mig_uuids=mig,
        slices=slices,
        gpu_error=gpu_error,
        cpu_jiffies=_cpu(sections.get("stat", (0, ""))[1]),
        cpu_count=int(ncpu) if ncpu.isdigit() and int(ncpu) > 0 else None,
        mem_total_mib=memory.get("MemTotal"),
        mem_available_mib=memory.get("MemAvailable"),
        health=health,
        lost=lost if not gpu_error else (),
    )
