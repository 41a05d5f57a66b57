"""AMD's readers of the corpus (`make test-corpus`): amd-smi's and rocm-smi's outputs.

What the probe asks (amd-smi's JSON, rocm-smi's `--json`) is read by gpuhive's own parsers
(hosts/vendors/amd_read.py). Their text views are read by the same parsers after amd_read's
converters (`text_view`: amd-smi's `KEY: value` tree; `rocm_text`: rocm-smi's `GPU[i] : key:
value` lines). The tables (amd-smi `monitor`, rocm-smi's concise view and `--showhw`) and
amd-smi's CSV are formats the probe never asks for: small readers here check that they hold
the GPUs and processes the others do.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from jupyter_gpuhive.hosts.vendors import amd_read
from jupyter_gpuhive.model.topology import TopologyError

from .check import GpuSeen, Reading, reader

_PROMPT = re.compile(r"^\$ .*$", re.M)
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+\S")


def _rocm(text: str, data: dict[str, Any]) -> Reading:
    """rocm-smi's cards and processes as gpuhive reads them."""
    import json

    reading = amd_read.read_rocm_smi(0, json.dumps(data))
    gpus = [GpuSeen(g.uuid, g.name, g.mem_total_mib) for g in reading.gpus]
    facts: dict[str, Any] = {"bus": [g.pci_bus_id for g in reading.gpus]}
    try:
        topology = amd_read.parse_topology(json.dumps(data))
        facts["links"] = sorted({kind for kind in topology.links.values()})
    except TopologyError:
        pass
    return Reading(gpus, [p.pid for p in reading.processes], None, facts)


@reader("amd", "amd/rocm-smi-json.*.json")
def rocm_json(name: str, text: str) -> Reading:
    """rocm-smi --json (ROCm 3 to 6)."""
    data = amd_read.loads(text)
    reading = _rocm(text, data)
    reading.facts["driver"] = (data.get("system") or {}).get("Driver version")
    return reading


@reader("amd", "amd/rocm-smi-a.*.txt", lacks=("memory",))
def rocm_all(name: str, text: str) -> Reading:
    """rocm-smi -a: its `GPU[i] : key: value` lines (no VRAM size in this view)."""
    return _rocm(text, amd_read.rocm_text(text))


@reader("amd", "amd/rocm-smi-showtoponuma.*.txt", lacks=("uuid", "name", "memory"))
def rocm_numa(name: str, text: str) -> Reading:
    """rocm-smi --showtoponuma: each GPU's NUMA node only."""
    cards = amd_read.rocm_text(text)
    numa = [card.get("(Topology) Numa Node") for _, card in sorted(cards.items())]
    return Reading([GpuSeen(None, None, None) for _ in cards], facts={"numa": numa})


def _table_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if _TABLE_ROW.match(line)]


@reader("amd", "amd/rocm-smi-showhw.*.txt", lacks=("uuid", "name", "memory"))
def rocm_showhw(name: str, text: str) -> Reading:
    """rocm-smi --showhw: a table of device ids and bus addresses (not read by gpuhive)."""
    rows = _table_rows(text)
    return Reading([GpuSeen(None, None, None) for _ in rows], facts={"bus": [r[-1] for r in rows]})


@reader("amd", "amd/rocm-smi.*.txt", lacks=("uuid", "memory"))
def rocm_concise(name: str, text: str) -> Reading:
    """rocm-smi's concise view: each GPU a row, its name on the next line (not read by gpuhive)."""
    lines = text.splitlines()
    gpus, power = [], []
    for n, line in enumerate(lines):
        if _TABLE_ROW.match(line) and "[" in line:
            following = lines[n + 1].strip() if n + 1 < len(lines) else ""
            gpus.append(GpuSeen(None, following or None, None))
            power.append(next((w for w in line.split() if w.endswith("W")), None))
    return Reading(gpus, facts={"power": power})


@reader("amd", "amd/amd-smi-monitor-*.txt", lacks=("uuid", "name", "memory"))
def amd_monitor(name: str, text: str) -> Reading:
    """amd-smi monitor: a table with units inside its cells, VRAM only where asked (`-v`)
    (not read by gpuhive)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    header = lines[0].split()
    gpus, util = [], []
    for line in lines[1:]:
        cells = re.findall(r"\S+(?: (?:W|°C|%|MHz|MB|GB))?", line)
        row = dict(zip(header, cells, strict=False))
        memory = amd_read.number(row.get("VRAM_TOTAL"), True)
        gpus.append(GpuSeen(None, None, None if memory is None else round(memory)))
        util.append(amd_read.number(row.get("GFX_UTIL")))
    return Reading(gpus, facts={"gfx_util": util})


@reader("amd", "amd/amd-smi-process-csv.*.csv", lacks=("uuid", "name", "memory"))
def amd_csv(name: str, text: str) -> Reading:
    """amd-smi process --csv: memory in bytes without a unit (not read by gpuhive)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    vram = [round(int(r["vram_mem"]) / 2**20) for r in rows]
    return Reading(pids=[int(r["pid"]) for r in rows], facts={"vram_mib": vram})


def _amd_smi(data: list[dict[str, Any]]) -> Reading:
    """amd-smi's per-GPU objects (JSON, or the text view converted) read by gpuhive's parsers:
    whatever the command printed (list, static, metric, process, topology)."""
    listed = {int(item["gpu"]): item for item in data}
    facts: dict[str, Any] = {}
    gpus: list[GpuSeen] = []
    identity = any("uuid" in i or "asic" in i or "vram" in i for i in listed.values())
    for _, item in sorted(listed.items()):
        if identity:
            size = amd_read.number((item.get("vram") or {}).get("size"), True)
            memory = None if size is None else round(size)
            name = (item.get("asic") or {}).get("market_name")
            gpus.append(GpuSeen(amd_read.uuid_of(item, item.get("bdf")), name, memory))
        else:
            gpus.append(GpuSeen(None, None, None))
    metrics = [i for i in listed.values() if {"power", "usage", "mem_usage"} & set(i)]
    if metrics:
        facts["power_w"] = [amd_read.number((m.get("power") or {}).get("socket_power"))
                            for m in metrics]  # fmt: skip
        facts["gfx_activity"] = [amd_read.number((m.get("usage") or {}).get("gfx_activity"))
                                 for m in metrics]  # fmt: skip
        facts["health"] = [amd_read.health_of(m).state for m in metrics]
    if any("limit" in i for i in listed.values()):
        facts["max_power_w"] = [amd_read.number((i.get("limit") or {}).get("max_power"))
                                for i in listed.values()]  # fmt: skip
    procs = amd_read.processes_of(listed, {})
    if procs:
        facts["vram_mib"] = [p.used_memory_mib for p in procs]
    if any("link_type" in i for i in listed.values()):
        import json

        links = amd_read.parse_topology(json.dumps(data)).links
        facts["links"] = {f"{a}-{b}": kind for (a, b), kind in sorted(links.items())}
    return Reading(gpus, [p.pid for p in procs], None, facts)


@reader("amd", "amd/amd-smi-*.json", lacks=("uuid", "name", "memory"))
def amd_json(name: str, text: str) -> Reading:
    """amd-smi --json."""
    return _amd_smi(amd_read.loads(text))


@reader("amd", "amd/amd-smi-list.*.txt", lacks=("name", "memory"))
def amd_list(name: str, text: str) -> Reading:
    """amd-smi list: BDF and UUID (whose serial is ROCR_VISIBLE_DEVICES's id)."""
    return _amd_smi(amd_read.text_view(text))


@reader("amd", "amd/amd-smi-static.*.txt", lacks=("memory",))
def amd_static(name: str, text: str) -> Reading:
    """amd-smi static: the identity gpuhive reads once per probe session (the one capture
    is cut before its VRAM block)."""
    return _amd_smi(amd_read.text_view(text))


@reader("amd", "amd/*amd-smi-*.txt", lacks=("uuid", "name", "memory"))
def amd_text(name: str, text: str) -> Reading:
    """amd-smi's other text views (metric, process, static --limit; a bare prompt line where
    the source lost the output)."""
    data = amd_read.text_view(_PROMPT.sub("", text))
    reading = _amd_smi(data)
    if not data:
        reading.facts["empty"] = True
    return reading
