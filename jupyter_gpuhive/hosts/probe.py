"""The probe: ONE remote command per host per sweep, and the parsing of its answer.

The command asks nvidia-smi three things at once (GPU metrics, compute processes, the GPU
and MIG list), resolves the owners of the GPU processes with one `ps`, and reads CPU and
memory counters from /proc. It never sleeps: CPU utilisation comes from the difference
between two sweeps.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime

from .nvsmi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    GpuMetrics,
    NvsmiParseError,
    check_driver,
    parse_compute_apps,
    parse_gpu_list,
    parse_query_gpu,
)

MARK = "@@gpuhive:"

GPU_FIELDS = (*QUERY_GPU_FIELDS, "mig.mode.current")

# nvidia-smi is asked twice in parallel (metrics, processes); `-L` (MIG slice UUIDs) only
# runs when a GPU reports MIG mode enabled, so a plain host costs two nvidia-smi calls.
_SCRIPT = f"""
t=$(mktemp -d 2>/dev/null) || {{ t=/tmp/gpuhive.$$; mkdir -p "$t"; }}
nvidia-smi --query-gpu={",".join(GPU_FIELDS)} --format=csv,nounits >"$t/g" 2>&1 & g=$!
nvidia-smi --query-compute-apps={",".join(QUERY_APPS_FIELDS)} --format=csv,nounits \
  >"$t/a" 2>&1 & a=$!
wait $g; echo "{MARK}gpus $?"; cat "$t/g"; echo
if grep -q ', Enabled' "$t/g"; then nvidia-smi -L >"$t/l" 2>&1; l=$?; else : >"$t/l"; l=0; fi
wait $a; echo "{MARK}apps $?"; cat "$t/a"; echo
echo "{MARK}list $l"; cat "$t/l"; echo
pids=$(sed -n 's/^\\([0-9][0-9]*\\), .*/\\1/p' "$t/a" | sort -u | paste -sd, -)
echo "{MARK}ps 0"; [ -n "$pids" ] && ps -ww -o pid=,pgid=,user:64=,args= -p "$pids"
echo "{MARK}stat 0"; head -n 1 /proc/stat
echo "{MARK}mem 0"; grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
echo "{MARK}ncpu 0"; getconf _NPROCESSORS_ONLN
rm -rf "$t"
"""

PROBE_COMMAND = "sh -c " + shlex.quote(_SCRIPT.strip())
_SECTION = re.compile(rf"^{re.escape(MARK)}(\w+) (\d+)$")


@dataclass(frozen=True)
class ProcessInfo:
    """A GPU compute process with its owner (a UNIX user) and command line."""

    pid: int
    gpu_uuid: str | None
    user: str | None
    command: str
    used_memory_mib: int | None
    pgid: int | None = None  # process group: tells a gpuhive job's processes apart


@dataclass(frozen=True)
class HostSample:
    """What one probe of one host found."""

    host: str
    taken_at: datetime
    gpus: tuple[GpuMetrics, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    mig_uuids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gpu_error: str | None = None
    cpu_jiffies: tuple[int, int] | None = None  # (busy, total) since boot
    cpu_count: int | None = None
    mem_total_mib: int | None = None
    mem_available_mib: int | None = None


def split_sections(text: str) -> dict[str, tuple[int, str]]:
    """The probe's answer as {section: (exit status, text)}."""
    sections: dict[str, tuple[int, str]] = {}
    name: str | None = None
    status, lines = 0, list[str]()
    for line in text.splitlines():
        match = _SECTION.match(line)
        if match:
            if name is not None:
                sections[name] = (status, "\n".join(lines))
            name, status, lines = match.group(1), int(match.group(2)), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = (status, "\n".join(lines))
    return sections


def _owners(text: str) -> dict[int, tuple[str, str, int]]:
    """`ps -o pid=,pgid=,user=,args=` lines as {pid: (user, command, pgid)}."""
    owners = {}
    for line in text.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            owners[int(parts[0])] = (parts[2], parts[3] if len(parts) > 3 else "", int(parts[1]))
    return owners


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


def parse_probe(host: str, text: str, taken_at: datetime) -> HostSample:
    """Turn the probe's answer into a HostSample; GPU trouble is reported, not raised."""
    sections = split_sections(text)
    if "gpus" not in sections:
        raise NvsmiParseError(f"the probe's answer has no GPU section: {text[:200]!r}")
    gpu_error = None
    gpus: list[GpuMetrics] = []
    processes: list[ProcessInfo] = []
    mig: dict[str, tuple[str, ...]] = {}
    try:
        status, body = sections["gpus"]
        check_driver(body, status)
        gpus = parse_query_gpu(body)
        if not gpus:
            raise NvsmiParseError("nvidia-smi listed no GPUs")
        status, body = sections.get("apps", (0, ""))
        check_driver(body, status)
        owners = _owners(sections.get("ps", (0, ""))[1])
        for proc in parse_compute_apps(body):
            found = owners.get(proc.pid)
            user, command, pgid = found if found else (None, proc.process_name or "", None)
            processes.append(
                ProcessInfo(proc.pid, proc.gpu_uuid, user, command, proc.used_memory_mib, pgid)
            )
        status, body = sections.get("list", (1, ""))
        if status == 0:
            for listing in parse_gpu_list(body):
                if listing.mig:
                    mig[listing.uuid] = tuple(m.uuid for m in listing.mig if m.uuid)
    except NvsmiParseError as error:
        gpu_error = str(error)
        gpus, processes = [], []
    memory = _meminfo(sections.get("mem", (0, ""))[1])
    ncpu = sections.get("ncpu", (0, ""))[1].strip()
    return HostSample(
        host=host,
        taken_at=taken_at,
        gpus=tuple(gpus),
        processes=tuple(processes),
        mig_uuids=mig,
        gpu_error=gpu_error,
        cpu_jiffies=_cpu(sections.get("stat", (0, ""))[1]),
        cpu_count=int(ncpu) if ncpu.isdigit() else None,
        mem_total_mib=memory.get("MemTotal"),
        mem_available_mib=memory.get("MemAvailable"),
    )
