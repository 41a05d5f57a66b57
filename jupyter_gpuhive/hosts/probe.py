"""The probe's answer parsed: one HostSample per host per sweep (the command: probe_command).

Decisions (owner, process group, GPU, health) come only from fields no user can write: PIDs,
uids and user names from `ps`, the vendor's own fields (hosts/vendors/). A command line arrives
in hex and is decoded for display.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..model.gpus import GpuMetrics, Health, MigDevice
from .containers import Container, cgroups_after_ps, container_of
from .framing import unframe
from .probe_command import END as END
from .probe_command import LIGHT_PROBE_COMMAND as LIGHT_PROBE_COMMAND
from .probe_command import MARK
from .probe_command import PROBE_COMMAND as PROBE_COMMAND
from .probe_command import PROBE_LOOP_COMMAND as PROBE_LOOP_COMMAND
from .probe_command import probe_command as probe_command
from .probe_command import probe_loop_command as probe_loop_command
from .vendors import Vendor, default_vendor

_SECTION = re.compile(rf"{re.escape(MARK)}(\w+) (\d+)")
_NL_MARK = f"\n{MARK}"
_CR = re.compile(r"\r$", re.MULTILINE)


@dataclass(frozen=True)
class ProcessInfo:
    """A GPU compute process with its owner (a UNIX user) and command line."""

    pid: int
    gpu_uuid: str | None  # the physical GPU's (of a slice: its parent)
    user: str | None
    command: str
    used_memory_mib: int | None
    pgid: int | None = None  # process group: tells a gpuhive job's processes apart
    mig_uuid: str | None = None  # the MIG slice it runs on, where MIG is on
    container: Container | None = None  # the container it runs in (hosts/containers.py)
    # The engine job that confines it ('Slurm job 12', from the node's slurmstepd: never from
    # what the user controls); None: it runs outside any (hosts/slurmpids.py)
    confined_by: str | None = None


@dataclass(frozen=True)
class HostSample:
    """What one probe of one host found."""

    host: str
    taken_at: datetime
    gpus: tuple[GpuMetrics, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    mig_uuids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # physical GPU UUID -> its slices (uuid, profile, instance ids, memory)
    slices: dict[str, tuple[MigDevice, ...]] = field(default_factory=dict)
    gpu_error: str | None = None
    cpu_jiffies: tuple[int, int] | None = None  # (busy, total) since boot
    cpu_count: int | None = None
    mem_total_mib: int | None = None
    mem_available_mib: int | None = None
    health: dict[str, Health] = field(default_factory=dict)  # GPU UUID -> its health
    lost: tuple[tuple[str, str], ...] = ()  # (PCI bus id, message) of GPUs the tool lost
    # An engine under the host (Slurm) drains GPUs as `drainer`: GPU UUID -> why it drained it
    # (None: no engine speaks for the host's drains)
    drainer: str | None = None
    drained: dict[str, str] = field(default_factory=dict)
    # GPUs an engine's jobs hold now, as the engine says (GPU UUID -> 'Slurm job'): busy,
    # even where gpuhive sees no process of theirs
    engine_held: dict[str, str] = field(default_factory=dict)


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


def _owners(text: str) -> dict[int, tuple[str, str, int]]:
    """The probe's `ps` lines ("PID PGID UID USER xHEX") as {pid: (user, command, pgid)}.

    PID, process group, uid and user name are fields no user can write; the command line
    comes in hex (the probe's PS_AWK) and is decoded for display only, so no argument can
    add, end or hide a line. A PID that comes twice is nobody's (None beats a forged owner).
    """
    owners: dict[int, tuple[str, str, int]] = {}
    twice: set[int] = set()
    for line in text.split("\n"):
        parts = line.split(" ")
        if len(parts) != 5 or not all(p.isdigit() for p in parts[:3]) or not parts[3]:
            continue
        pid = int(parts[0])
        if pid in owners:
            twice.add(pid)
        owners[pid] = (parts[3], unframe(parts[4]) or "", int(parts[1]))
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


def parse_probe(
    host: str,
    text: str,
    taken_at: datetime,
    seen: dict[str, Any] | None = None,
    vendor: Vendor | None = None,
) -> HostSample:
    """Turn the probe's answer into a HostSample; GPU trouble is reported, not raised.

    `vendor` (default: nvidia) reads its own sections; `seen` is the caller's memory, per host,
    of what earlier answers sent (the vendor's; `Vendor.held` says what to send along with the
    next request), updated by each answer."""
    sections = split_sections(text)  # a vendor raises GpuReadError without its sections
    reading = (vendor or default_vendor()).read(host, sections, seen)
    ps = sections.get("ps", (0, ""))[1]
    owners = _owners(ps)
    cgroups = cgroups_after_ps(ps) if "\n=" in ps else {}
    processes = []
    for proc in reading.processes:
        found = owners.get(proc.pid)
        user, command, pgid = found if found else (None, "", None)
        cgroup = cgroups.get(proc.pid)
        processes.append(
            ProcessInfo(proc.pid, proc.gpu_uuid, user, command, proc.used_memory_mib, pgid,
                        mig_uuid=proc.slice_uuid,
                        container=container_of(cgroup) if cgroup and found else None)
        )  # fmt: skip
    memory = _meminfo(sections.get("mem", (0, ""))[1])
    ncpu = sections.get("ncpu", (0, ""))[1].strip()
    return HostSample(
        host=host,
        taken_at=taken_at,
        gpus=reading.gpus,
        processes=tuple(processes),
        mig_uuids=reading.slice_uuids,
        slices=reading.slices,
        gpu_error=reading.error,
        cpu_jiffies=_cpu(sections.get("stat", (0, ""))[1]),
        cpu_count=int(ncpu) if ncpu.isdigit() and int(ncpu) > 0 else None,
        mem_total_mib=memory.get("MemTotal"),
        mem_available_mib=memory.get("MemAvailable"),
        health=reading.health,
        lost=reading.lost,
    )
