"""The probe's answer parsed: one HostSample per host per sweep (the command: probe_command).

Decisions (owner, process group, GPU, health) come only from fields no user can write: PIDs,
uids and user names from `ps`, nvidia-smi's CSV fields. A command line arrives in hex and is
decoded for display; a driver's failure sentence counts only in nvidia-smi's own sections.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime

from .containers import Container, cgroups_after_ps, container_of
from .framing import unframe
from .health import Health, health_from_csv, lost_gpus, without_lost
from .nvsmi import (
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

# The command's names, re-exported: callers import the probe from here.
from .probe_command import APPS_QUERY as APPS_QUERY
from .probe_command import END as END
from .probe_command import GPU_FIELDS as GPU_FIELDS
from .probe_command import GPU_QUERY as GPU_QUERY
from .probe_command import LIGHT_PROBE_COMMAND as LIGHT_PROBE_COMMAND
from .probe_command import LIST_QUERY as LIST_QUERY
from .probe_command import MARK, NVSMI_SECTIONS
from .probe_command import PROBE_COMMAND as PROBE_COMMAND
from .probe_command import PROBE_LOOP_COMMAND as PROBE_LOOP_COMMAND
from .probe_command import XML_QUERY as XML_QUERY
from .probe_command import probe_loop_command as probe_loop_command

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
    """The health query's lines of this answer, or those it says are unchanged (see
    `parse_probe`); "" when the query failed."""
    same = sections.get("healthsame")
    if same is not None:
        version = same[1].strip()
        held = seen.get(host) if seen is not None else None
        if seen is None or held is None or held[0] != version:
            if seen is not None:  # not what was asked for: the next request asks afresh
                seen.pop(host, None)
            raise NvsmiParseError(f"the probe's health lines {version!r} are not known here")
        return held[1]
    status, lines = sections.get("health", (1, ""))
    version = sections.get("healthv", (1, ""))[1].strip()
    if seen is not None:
        if version and status == 0:
            seen[host] = (version, lines)
        else:
            seen.pop(host, None)
    return lines if status == 0 else ""


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
    gpu_error = None
    gpus: list[GpuMetrics] = []
    processes: list[ProcessInfo] = []
    mig: dict[str, tuple[str, ...]] = {}
    slices: dict[str, tuple[MigDevice, ...]] = {}
    listings: list[GpuListing] = []
    # nvidia-smi's own answers only: a sentence in a user's text (the `ps` section) is not one
    lost = lost_gpus("\n".join(sections[n][1] for n in NVSMI_SECTIONS if n in sections))
    if lost:  # a GPU nvidia-smi cannot reach: its line goes, the others' rows stay
        sections = {
            name: (0 if name in ("gpus", "apps", "list", "health") else status, without_lost(body))
            if name in (*NVSMI_SECTIONS, "xml") else (status, body)
            for name, (status, body) in sections.items()
        }  # fmt: skip
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
    lines = _health_lines(host, sections, seen)
    health = (
        health_from_csv(
            lines, {g.uuid for g in gpus if g.uuid}, {g.uuid: g.temperature_c for g in gpus}
        )
        if gpus and lines
        else {}
    )
    xml = sections.get("xml", (1, ""))[1].removeprefix("|").replace("\n|", "\n")
    if "<process_name" in xml:
        xml = without_process_names(xml)
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
