"""Render a host snapshot in nvidia-smi's formats: query CSV, ``-q -x`` XML and ``-L``.

Standard library only: the ``nvidia-smi`` stand-in imports this on every call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .inventory import NA
from .snapshot import GpuProcessRow, GpuState, HostSnapshot

DRIVER_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
DRIVER_FAILURE_EXIT = 9


def escape(text: str) -> str:
    """XML-escape text (xml.sax.saxutils would import urllib: too slow for every call)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class UnknownField(ValueError):
    """A query named a field nvidia-smi does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(f'Field "{name}" is not a valid field to query.')
        self.name = name


@dataclass(frozen=True)
class FieldSpec:
    """How one query field is named in the header, which unit it carries, and its value."""

    header: str
    unit: str
    value: Callable[[HostSnapshot, GpuState], object]


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _mig_mode(s: HostSnapshot, g: GpuState) -> str | None:
    return _enabled(g.gpu.mig_enabled) if g.gpu.mig_capable else None


GPU_FIELDS: dict[str, FieldSpec] = {
    "timestamp": FieldSpec("timestamp", "", lambda s, g: _csv_time(s.timestamp)),
    "driver_version": FieldSpec("driver_version", "", lambda s, g: s.config.driver_version),
    "count": FieldSpec("count", "", lambda s, g: len(s.config.gpus)),
    "index": FieldSpec("index", "", lambda s, g: g.gpu.index),
    "uuid": FieldSpec("uuid", "", lambda s, g: g.gpu.uuid),
    "name": FieldSpec("name", "", lambda s, g: g.gpu.name),
    "pci.bus_id": FieldSpec("pci.bus_id", "", lambda s, g: g.gpu.pci_bus_id),
    "persistence_mode": FieldSpec(
        "persistence_mode", "", lambda s, g: _enabled(g.gpu.persistence_mode)
    ),
    "pstate": FieldSpec("pstate", "", lambda s, g: "P0"),
    "compute_mode": FieldSpec("compute_mode", "", lambda s, g: "Default"),
    "mig.mode.current": FieldSpec("mig.mode.current", "", _mig_mode),
    "mig.mode.pending": FieldSpec("mig.mode.pending", "", _mig_mode),
    "fan.speed": FieldSpec("fan.speed", "%", lambda s, g: g.gpu.fan_pct),
    "utilization.gpu": FieldSpec("utilization.gpu", "%", lambda s, g: g.util_gpu),
    "utilization.memory": FieldSpec("utilization.memory", "%", lambda s, g: g.util_mem),
    "memory.total": FieldSpec("memory.total", "MiB", lambda s, g: g.gpu.memory_total_mib),
    "memory.reserved": FieldSpec("memory.reserved", "MiB", lambda s, g: g.gpu.memory_reserved_mib),
    "memory.used": FieldSpec("memory.used", "MiB", lambda s, g: g.mem_used_mib),
    "memory.free": FieldSpec("memory.free", "MiB", lambda s, g: g.mem_free_mib),
    "temperature.gpu": FieldSpec("temperature.gpu", "", lambda s, g: g.temperature_c),
    "power.draw": FieldSpec("power.draw", "W", lambda s, g: g.power_w),
    "power.limit": FieldSpec("power.limit", "W", lambda s, g: g.gpu.power_limit_w),
    "clocks.sm": FieldSpec("clocks.current.sm", "MHz", lambda s, g: g.gpu.clocks_sm_mhz),
}
GPU_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "persistence.mode": "persistence_mode",
    "clocks.current.sm": "clocks.sm",
    "power.draw.instant": "power.draw",
}

Row = tuple[GpuState, GpuProcessRow]
APP_FIELDS: dict[str, tuple[str, str, Callable[[Row], object]]] = {
    "pid": ("pid", "", lambda r: r[1].pid),
    "process_name": ("process_name", "", lambda r: r[1].process.name),
    "gpu_uuid": ("gpu_uuid", "", lambda r: r[0].gpu.uuid),
    "gpu_name": ("gpu_name", "", lambda r: r[0].gpu.name),
    "gpu_bus_id": ("gpu_bus_id", "", lambda r: r[0].gpu.pci_bus_id),
    "gpu_serial": ("gpu_serial", "", lambda r: None),
    "used_memory": ("used_gpu_memory", "MiB", lambda r: r[1].process.used_memory_mib),
}
APP_ALIASES = {"name": "process_name", "used_gpu_memory": "used_memory"}


def _csv_time(timestamp: float) -> str:
    """nvidia-smi's CSV timestamp: '2026/11/22 01:51:50.123'."""
    millis = int(timestamp * 1000) % 1000
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(timestamp)) + f".{millis:03d}"


def _cell(value: object, unit: str, nounits: bool, marker: str | None = None) -> str:
    """One CSV cell: a value with its unit, or a bracketed N/A / Not Supported marker."""
    if marker is not None or value is None:
        return f"[{marker or NA}]"
    text = f"{value:.2f}" if unit == "W" and isinstance(value, int | float) else str(value)
    return text if nounits or not unit else f"{text} {unit}"


def _header(name: str, unit: str) -> str:
    return f"{name} [{unit}]" if unit else name


def _lines(header: list[str], rows: list[list[str]], noheader: bool) -> str:
    lines = ([] if noheader else [", ".join(header)]) + [", ".join(row) for row in rows]
    return "".join(f"{line}\n" for line in lines)


def query_gpu_csv(
    snap: HostSnapshot, names: Sequence[str], *, noheader: bool = False, nounits: bool = False
) -> str:
    """``--query-gpu=NAMES --format=csv[,noheader][,nounits]``."""
    specs = []
    for name in names:
        key = GPU_ALIASES.get(name, name)
        if key not in GPU_FIELDS:
            raise UnknownField(name)
        specs.append((key, GPU_FIELDS[key]))
    rows = [
        [
            _cell(spec.value(snap, g), spec.unit, nounits, g.gpu.unavailable.get(key))
            for key, spec in specs
        ]
        for g in snap.gpus
    ]
    return _lines([_header(s.header, s.unit) for _, s in specs], rows, noheader)


def query_apps_csv(
    snap: HostSnapshot, names: Sequence[str], *, noheader: bool = False, nounits: bool = False
) -> str:
    """``--query-compute-apps=NAMES --format=csv[,noheader][,nounits]``."""
    specs = []
    for name in names:
        key = APP_ALIASES.get(name, name)
        if key not in APP_FIELDS:
            raise UnknownField(name)
        specs.append(APP_FIELDS[key])
    rows = [[_cell(get(row), unit, nounits) for _, unit, get in specs] for row in snap.rows()]
    return _lines([_header(header, unit) for header, unit, _ in specs], rows, noheader)


def list_gpus(snap: HostSnapshot) -> str:
    """``-L``: one line per GPU, MIG slices indented below."""
    out = []
    for g in snap.gpus:
        out.append(f"GPU {g.gpu.index}: {g.gpu.name} (UUID: {g.gpu.uuid})\n")
        for i, mig in enumerate(g.gpu.mig):
            out.append(f"  MIG {mig.profile:<11} Device {i:>2}: (UUID: {mig.uuid})\n")
    return "".join(out)


# --- -q -x ------------------------------------------------------------------------------

Node = tuple[str, "str | list[Node]"]


def _xml(node: Node, depth: int) -> list[str]:
    """Lines of one element, tab-indented like nvidia-smi (empty lists keep open/close tags)."""
    tag, content = node
    pad = "\t" * depth
    if isinstance(content, str):
        return [f"{pad}<{tag}>{escape(content)}</{tag}>"]
    lines = [f"{pad}<{tag}>"]
    for child in content:
        lines.extend(_xml(child, depth + 1))
    return [*lines, f"{pad}</{tag}>"]


def _na(value: object, unit: str = "") -> str:
    if value is None:
        return NA
    text = f"{value:.2f}" if unit == "W" and isinstance(value, int | float) else str(value)
    return f"{text} {unit}" if unit else text


def _memory(total: int, reserved: int, used: int) -> Node:
    return (
        "fb_memory_usage",
        [
            ("total", f"{total} MiB"),
            ("reserved", f"{reserved} MiB"),
            ("used", f"{used} MiB"),
            ("free", f"{total - reserved - used} MiB"),
        ],
    )


def _gpu_xml(snap: HostSnapshot, g: GpuState) -> list[str]:
    """The ``<gpu>`` element of one GPU."""
    gpu = g.gpu
    off = gpu.unavailable
    mode = (_enabled(gpu.mig_enabled) if gpu.mig_capable else NA,) * 2
    migs: list[Node] = [
        (
            "mig_device",
            [
                ("index", str(i)),
                ("gpu_instance_id", str(m.gpu_instance_id)),
                ("compute_instance_id", str(m.compute_instance_id)),
                (
                    "device_attributes",
                    [("shared", [("multiprocessor_count", str(m.multiprocessor_count))])],
                ),
                _memory(m.memory_total_mib, 0, g.mig_used_mib[i]),
            ],
        )
        for i, m in enumerate(gpu.mig)
    ]
    procs: list[Node] = []
    for row in g.rows:
        mig = gpu.mig[row.placement.mig_index] if row.placement.mig_index is not None else None
        procs.append(
            (
                "process_info",
                [
                    ("gpu_instance_id", str(mig.gpu_instance_id) if mig else NA),
                    ("compute_instance_id", str(mig.compute_instance_id) if mig else NA),
                    ("pid", str(row.pid)),
                    ("type", "C"),
                    ("process_name", row.process.name),
                    ("used_memory", f"{row.process.used_memory_mib} MiB"),
                ],
            )
        )
    major = snap.config.driver_version.split(".", 1)[0]
    power_tag = "gpu_power_readings" if major.isdigit() and int(major) >= 530 else "power_readings"
    power = None if "power.draw" in off else g.power_w
    children: list[Node] = [
        ("product_name", gpu.name),
        ("persistence_mode", _enabled(gpu.persistence_mode)),
        ("mig_mode", [("current_mig", mode[0]), ("pending_mig", mode[1])]),
        ("mig_devices", migs),
        ("uuid", gpu.uuid),
        ("minor_number", str(gpu.index)),
        ("pci", [("pci_bus_id", gpu.pci_bus_id)]),
        ("fan_speed", NA if "fan.speed" in off else _na(gpu.fan_pct, "%")),
        ("performance_state", "P0"),
        _memory(gpu.memory_total_mib, gpu.memory_reserved_mib or 0, g.mem_used_mib),
        ("compute_mode", "Default"),
        (
            "utilization",
            [
                ("gpu_util", NA if "utilization.gpu" in off else _na(g.util_gpu, "%")),
                ("memory_util", NA if "utilization.memory" in off else _na(g.util_mem, "%")),
            ],
        ),
        ("temperature", [("gpu_temp", _na(g.temperature_c, "C"))]),
        (
            power_tag,
            [("power_draw", _na(power, "W")), ("power_limit", _na(gpu.power_limit_w, "W"))],
        ),
        ("processes", procs),
    ]
    bus_id = escape(gpu.pci_bus_id).replace('"', "&quot;")
    lines = [f'\t<gpu id="{bus_id}">']
    for child in children:
        if child[0] == "mig_devices" and not migs:
            lines += ["\t\t<mig_devices>", "\t\t\tNone", "\t\t</mig_devices>"]
        else:
            lines += _xml(child, 2)
    return [*lines, "\t</gpu>"]


def query_xml(snap: HostSnapshot) -> str:
    """``-q -x``: the XML log with every GPU, its MIG devices and processes."""
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(snap.timestamp))
    lines = [
        '<?xml version="1.0" ?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
        "<nvidia_smi_log>",
        f"\t<timestamp>{stamp}</timestamp>",
        f"\t<driver_version>{escape(snap.config.driver_version)}</driver_version>",
        f"\t<cuda_version>{escape(snap.config.cuda_version)}</cuda_version>",
        f"\t<attached_gpus>{len(snap.config.gpus)}</attached_gpus>",
    ]
    for g in snap.gpus:
        lines += _gpu_xml(snap, g)
    return "\n".join([*lines, "</nvidia_smi_log>"]) + "\n"
