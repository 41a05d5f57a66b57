"""NVIDIA's readers for `make test-corpus`: each nvidia-smi output kind read by gpuhive's parsers.

Every reader goes through the project's own parsers (hosts/vendors/nvidia_*.py): the CSV
queries, `-q -x` (GPUs, processes, health), `-q` text, `-L`, `topo -m`, `nvlink -s`,
`--help-query-gpu`, `--version` and the failure outputs. Only the default summary table, which
gpuhive never reads, is read here with a few patterns (its GPUs and processes). The first
matching pattern wins, so the files whose command left out a GPU's UUID, name or memory are
registered first, with what their format `lacks`.
"""

from __future__ import annotations

import re

from jupyter_gpuhive.hosts.vendors.nvidia_fields import (
    driver_state,
    help_fields,
    placeholder_reason,
)
from jupyter_gpuhive.hosts.vendors.nvidia_health import lost_gpus, parse_health
from jupyter_gpuhive.hosts.vendors.nvidia_probe import GPU_FIELDS, HEALTH_FIELDS, ROW_FIELDS
from jupyter_gpuhive.hosts.vendors.nvidia_smi import (
    METRIC_FIELDS,
    field_name,
    parse_compute_apps,
    parse_csv,
    parse_gpu_list,
    parse_query_xml,
    raw_csv,
)
from jupyter_gpuhive.hosts.vendors.nvidia_text import (
    parse_nvlink_status,
    parse_query_text,
    parse_version,
)
from jupyter_gpuhive.hosts.vendors.nvidia_topology import parse_topology
from tests.corpus.check import GpuSeen, Reading, reader

NV = "nvidia"
# Files printed without a header: the fields their command asked for (the corpus' notes).
NOHEADER = {
    "query-gpu.unknown.gtx1080ti-8x.noheader.csv": [
        *("name", "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw"),
        *("power.limit", "fan.speed", "pstate", "clocks.current.graphics"),
        *("clocks.current.memory", "power.max_limit", "power.default_limit"),
    ],
    # only the first four of its 27 fields are known
    "query-gpu.unknown.rtx3080.zabbix.noheader.csv": [
        *("timestamp", "index", "name", "uuid"),
        *(f"field{n}" for n in range(4, 27)),
    ],
}


def _mib(value: str | None) -> int | None:
    found = re.match(r"^(\d+)(?: ?MiB)?$", (value or "").strip())
    return int(found[1]) if found else None


def _base(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _query_gpu(name: str, text: str) -> Reading:
    fields = NOHEADER.get(_base(name))
    raws = raw_csv(text, fields)
    rows = parse_csv(text, fields)
    gpus = [
        GpuSeen(row.get("uuid"), row.get("name"), _mib(row.get("memory.total"))) for row in rows
    ]
    missing = sorted(
        {f"{field_name(f)}: {placeholder_reason(c)}" for raw in raws for f, c in raw.items()
         if field_name(f) in METRIC_FIELDS and placeholder_reason(c)}
    )  # fmt: skip
    facts: dict[str, object] = {"not_reported": missing}
    for field in ("utilization.gpu", "temperature.gpu", "power.draw", "mig.mode.current"):
        if any(field in row for row in rows):
            facts[field] = [row.get(field) for row in rows]
    if any("driver_version" in row for row in rows):
        facts["driver_version"] = rows[0].get("driver_version")
    return Reading(gpus=gpus, facts=facts)


reader(NV, "nvidia/query-gpu.442.19.*", lacks=("uuid", "memory"))(_query_gpu)
reader(NV, "nvidia/query-gpu.unknown.gtx1080ti-8x.*", lacks=("uuid", "memory"))(_query_gpu)
reader(NV, "nvidia/query-gpu.unknown.rtx3080.zabbix.*", lacks=("memory",))(_query_gpu)
reader(NV, "nvidia/query-gpu.unknown.a10.lms.csv", lacks=("uuid", "name"))(_query_gpu)
reader(NV, "nvidia/query-gpu.510.47.03.*", lacks=("memory",))(_query_gpu)
reader(NV, "nvidia/query-gpu.570.133.07.compute_cap.csv", ("uuid", "name", "memory"))(_query_gpu)
reader(NV, "nvidia/query-gpu.unknown.rtx.mig-mode.csv", ("uuid", "name", "memory"))(_query_gpu)
reader(NV, "nvidia/query-gpu.*.csv")(_query_gpu)


@reader(NV, "nvidia/query-compute-apps.*.csv")
def _compute_apps(name: str, text: str) -> Reading:
    procs = parse_compute_apps(text)
    return Reading(
        pids=[p.pid for p in procs],
        facts={
            "used_mib": sum(p.used_memory_mib or 0 for p in procs),
            "on_gpus": sorted({p.gpu_uuid or "" for p in procs}),
        },
    )


@reader(NV, "nvidia/help-query-*.txt")
def _help(name: str, text: str) -> Reading:
    listed = help_fields(text)
    wanted = (*GPU_FIELDS, *HEALTH_FIELDS, *ROW_FIELDS)
    if "compute-apps" in name:
        return Reading(facts={"fields": len(listed), "pid": "pid" in listed})
    return Reading(
        facts={
            "fields": len(listed),
            "probe_fields_missing": [f for f in wanted if f not in listed],
        }
    )


@reader(NV, "nvidia/q-x.*.xml")
def _xml(name: str, text: str) -> Reading:
    report = parse_query_xml(text)
    health = parse_health(text)
    return Reading(
        gpus=[GpuSeen(g.uuid, g.name, g.mem_total_mib) for g in report.gpus],
        pids=[p.pid for p in report.processes],
        facts={
            "driver_version": report.driver_version,
            "power_w": [g.power_w for g in report.gpus],
            "mig_slices": sum(len(g.mig) for g in report.gpus),
            "health": [health[g.uuid].state if g.uuid in health else None for g in report.gpus],
        },
    )


@reader(NV, "nvidia/q.*.txt")
def _text(name: str, text: str) -> Reading:
    report = parse_query_text(text)
    return Reading(
        gpus=[GpuSeen(g.uuid or None, g.name, g.mem_total_mib) for g in report.gpus],
        pids=[p.pid for p in report.processes],
        facts={"driver_version": report.driver_version},
    )


@reader(NV, "nvidia/L.*.txt", lacks=("memory",))
def _list(name: str, text: str) -> Reading:
    listed = parse_gpu_list(text)
    return Reading(
        gpus=[GpuSeen(g.uuid, g.name, None) for g in listed],
        facts={"mig": [m.profile for g in listed for m in g.mig]},
    )


@reader(NV, "nvidia/topo-m.*.txt")
def _topo(name: str, text: str) -> Reading:
    topology = parse_topology(text)
    return Reading(
        facts={"gpus": len(topology.gpus), "links": sorted(set(topology.links.values()))}
    )


@reader(NV, "nvidia/nvlink-s.*.txt", lacks=("memory",))
def _nvlink(name: str, text: str) -> Reading:
    found = parse_nvlink_status(text)
    return Reading(
        gpus=[GpuSeen(uuid, gpu_name, None) for uuid, (gpu_name, _) in found.items()],
        facts={"links": [count for _, count in found.values()]},
    )


@reader(NV, "nvidia/version.*.txt")
def _version(name: str, text: str) -> Reading:
    return Reading(facts={"driver_version": parse_version(text)})


def _failure(name: str, text: str) -> Reading:
    listed = [
        GpuSeen(g.uuid, g.name, None)
        for g in parse_gpu_list("\n".join(ln for ln in text.splitlines() if ln.startswith("GPU ")))
    ]
    state = driver_state(text)
    return Reading(
        gpus=listed,
        state=state.state if state else None,
        facts={"lost": [bus for bus, _ in lost_gpus(text)]},
    )


reader(NV, "nvidia/error.nvlink-g.*", lacks=("memory",))(_failure)
reader(NV, "nvidia/error.*.txt")(_failure)


_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off|WDDM|TCC)\s+\|")
_TABLE_MEM = re.compile(r"\|\s+\d+MiB /\s*(\d+)MiB \|")
_TABLE_PROC = re.compile(r"^\|\s+\d+\s+(?:\S+\s+\S+\s+)?(\d+)\s+[CGM+]+\s+")
_TABLE_DRIVER = re.compile(r"(?:Driver|KMD) Version: (\S+)")


@reader(NV, "nvidia/table.*.txt", lacks=("uuid",))
def _table(name: str, text: str) -> Reading:
    """The default table (gpuhive never reads it): GPUs, their memory, processes."""
    gpus: list[GpuSeen] = []
    pids: list[int] = []
    lines = text.splitlines()
    in_procs = False
    for n, line in enumerate(lines):
        in_procs = in_procs or "Processes:" in line
        gpu = _TABLE_GPU.match(line)
        if gpu and not in_procs:
            memory = _TABLE_MEM.search(lines[n + 1]) if n + 1 < len(lines) else None
            gpus.append(GpuSeen(None, gpu[2], int(memory[1]) if memory else None))
        elif in_procs and (proc := _TABLE_PROC.match(line)):
            pids.append(int(proc[1]))
    driver = _TABLE_DRIVER.search(text)
    return Reading(gpus=gpus, pids=pids, facts={"driver_version": driver[1] if driver else None})
