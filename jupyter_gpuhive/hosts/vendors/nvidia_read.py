"""NVIDIA's sections of the probe's answer read into neutral values (model/gpus.py).

Decisions (GPU, health) come only from fields no user can write: nvidia-smi's CSV fields. A
driver's failure sentence counts only in nvidia-smi's own sections; `-q -x` carries process
names and gives only the MIG slices and which slice each process runs on.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ...model.gpus import GpuMetrics, MigDevice, ProcessReading, VendorReading
from .nvidia_fields import NOT_KNOWN
from .nvidia_health import health_from_csv, lost_gpus, without_lost
from .nvidia_probe import GPU_FIELDS, NVSMI_SECTIONS
from .nvidia_smi import (
    GpuListing,
    GpuProcess,
    NvsmiParseError,
    NvsmiReport,
    check_driver,
    field_name,
    parse_compute_apps,
    parse_gpu_list,
    parse_query_gpu,
    parse_query_xml,
)

_PROCESS_NAME = re.compile(r"<process_name>.*?</process_name>", re.DOTALL)
Sections = dict[str, tuple[int, str]]


def without_process_names(text: str) -> str:
    """``-q -x`` output with every process name emptied: nvidia-smi does not always escape
    them, and a name must not break the XML or pass for a driver failure."""
    return _PROCESS_NAME.sub("<process_name></process_name>", text)


def health_lines(host: str, sections: Sections, seen: dict[str, Any] | None) -> str:
    """The health query's lines of this answer, or those it says are unchanged (`seen`:
    {host: (version, lines)} the caller keeps); "" when the query failed."""
    same = sections.get("healthsame")
    if same is not None:
        version = same[1].strip()
        held = seen.get(host) if seen is not None else None
        if seen is None or held is None or held[0] != version:
            if seen is not None:  # not what was asked for: the next request asks afresh
                seen.pop(host, None)
            raise NvsmiParseError(f"the probe's health lines {version!r} are not known here")
        return str(held[1])
    status, lines = sections.get("health", (1, ""))
    version = sections.get("healthv", (1, ""))[1].strip()
    if seen is not None:
        if version and status == 0:
            seen[host] = (version, lines)
        else:
            seen.pop(host, None)
    return lines if status == 0 else ""


def _placements(
    report: NvsmiReport, processes: list[GpuProcess]
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
    listings: list[GpuListing], report: NvsmiReport, processes: list[GpuProcess]
) -> tuple[dict[str, tuple[MigDevice, ...]], dict[int, str | None]]:
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
    return slices, on_slice


def _not_known(gpus: list[GpuMetrics], body: str) -> list[GpuMetrics]:
    """`gpus` with each field the probe wanted but the host's driver does not know (the CSV
    header lacks it) as not reported."""
    header = body.lstrip().split("\n", 1)[0]
    asked = {field_name(cell) for cell in header.split(", ")}
    missing = tuple((f, NOT_KNOWN) for f in GPU_FIELDS if f not in asked)
    return [replace(g, unreported=g.unreported + missing) for g in gpus] if missing else gpus


def read_sections(host: str, sections: Sections, seen: dict[str, Any] | None) -> VendorReading:
    """GPUs, processes, MIG slices and health from nvidia-smi's sections; GPU trouble is
    reported (`error`), not raised (but for a health version the caller does not hold)."""
    if "gpus" not in sections:
        raise NvsmiParseError("the probe's answer has no GPU section")
    gpu_error = None
    gpus: list[GpuMetrics] = []
    apps: list[GpuProcess] = []
    mig: dict[str, tuple[str, ...]] = {}
    slices: dict[str, tuple[MigDevice, ...]] = {}
    listings: list[GpuListing] = []
    on_slice: dict[int, str | None] = {}
    # nvidia-smi's own answers only: a sentence in a user's text (the `ps` section) is not one
    said = "\n".join(sections[n][1] for n in NVSMI_SECTIONS if n in sections)
    lost = tuple(dict.fromkeys(lost_gpus(said)))  # each query says it: once per GPU
    if lost:  # a GPU nvidia-smi cannot reach: its line goes, the others' rows stay
        sections = {
            name: (0 if name in NVSMI_SECTIONS else status, without_lost(body))
            if name in (*NVSMI_SECTIONS, "xml") else (status, body)
            for name, (status, body) in sections.items()
        }  # fmt: skip
    try:
        status, body = sections["gpus"]
        check_driver(body, status)
        gpus = _not_known(parse_query_gpu(body), body)
        if not gpus:
            raise NvsmiParseError("nvidia-smi listed no GPUs")
        status, body = sections.get("apps", (0, ""))
        check_driver(body, status)
        apps = parse_compute_apps(body)
        status, body = sections.get("list", (1, ""))
        listings = parse_gpu_list(body) if status == 0 else []
        for listing in listings:
            if listing.mig:
                mig[listing.uuid] = tuple(m.uuid for m in listing.mig if m.uuid)
    except NvsmiParseError as error:
        gpu_error = str(error)
        gpus, apps, listings = [], [], []
    lines = health_lines(host, sections, seen)
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
            slices, on_slice = _slices(listings, parse_query_xml(xml), apps)
        except NvsmiParseError:
            slices = {}
    processes = tuple(
        ProcessReading(
            p.pid,
            p.gpu_uuid,
            p.used_memory_mib,
            on_slice.get(p.pid) if p.gpu_uuid in slices else None,
        )
        for p in apps
    )
    return VendorReading(
        gpus=tuple(gpus),
        processes=processes,
        slice_uuids=mig,
        slices=slices,
        health=health,
        lost=lost if not gpu_error else (),
        error=gpu_error,
    )
