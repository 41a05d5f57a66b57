"""The stand-in's query CSV and ``-L``: field tables and printers, free of heavy imports.

Shared by the dataclass model (``formats``) and the fast path (``fastpath``) so both print the
same; like ``core`` it imports only ``time`` and works on duck-typed objects.
"""

from __future__ import annotations

import functools
import time

from .core import NA
from .generations import unknown_field
from .health import HEALTH_FIELDS, health_field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

# Field getters take (snapshot, GPU state) or a (GPU state, process row) pair: the dataclasses
# of ``snapshot`` or the stand-in's light stand-ins for them (same attribute names).


class UnknownField(ValueError):
    """A query named a field nvidia-smi does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(f'Field "{name}" is not a valid field to query.')
        self.name = name


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _mig_mode(s: Any, g: Any) -> str | None:
    return _enabled(g.gpu.mig_enabled) if g.gpu.mig_capable else None


def _health(name: str, s: Any, g: Any) -> str | None:
    return health_field(g.gpu, name)


def csv_time(timestamp: float) -> str:
    """nvidia-smi's CSV timestamp: '2026/11/22 01:51:50.123'."""
    millis = int(timestamp * 1000) % 1000
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(timestamp)) + f".{millis:03d}"


# field -> (header, unit, value getter)
GPU_FIELDS: dict[str, tuple[str, str, Callable[[Any, Any], object]]] = {
    "timestamp": ("timestamp", "", lambda s, g: csv_time(s.timestamp)),
    "driver_version": ("driver_version", "", lambda s, g: s.config.driver_version),
    "count": ("count", "", lambda s, g: len(s.config.gpus)),
    "index": ("index", "", lambda s, g: g.gpu.index),
    "uuid": ("uuid", "", lambda s, g: g.gpu.uuid),
    "name": ("name", "", lambda s, g: g.gpu.name),
    "pci.bus_id": ("pci.bus_id", "", lambda s, g: g.gpu.pci_bus_id),
    "persistence_mode": ("persistence_mode", "", lambda s, g: _enabled(g.gpu.persistence_mode)),
    "pstate": ("pstate", "", lambda s, g: "P0"),
    "compute_mode": ("compute_mode", "", lambda s, g: "Default"),
    "mig.mode.current": ("mig.mode.current", "", _mig_mode),
    "mig.mode.pending": ("mig.mode.pending", "", _mig_mode),
    "fan.speed": ("fan.speed", "%", lambda s, g: g.gpu.fan_pct),
    "utilization.gpu": ("utilization.gpu", "%", lambda s, g: g.util_gpu),
    "utilization.memory": ("utilization.memory", "%", lambda s, g: g.util_mem),
    "memory.total": ("memory.total", "MiB", lambda s, g: g.gpu.memory_total_mib),
    "memory.reserved": ("memory.reserved", "MiB", lambda s, g: g.gpu.memory_reserved_mib),
    "memory.used": ("memory.used", "MiB", lambda s, g: g.mem_used_mib),
    "memory.free": ("memory.free", "MiB", lambda s, g: g.mem_free_mib),
    "temperature.gpu": (
        "temperature.gpu",
        "",
        lambda s, g: 95 if getattr(g.gpu, "fault", None) == "thermal" else g.temperature_c,
    ),  # fmt: skip (95: sim/health.py's thermal preset)
    "power.draw": ("power.draw", "W", lambda s, g: g.power_w),
    "power.limit": ("power.limit", "W", lambda s, g: g.gpu.power_limit_w),
    "clocks.sm": ("clocks.current.sm", "MHz", lambda s, g: g.gpu.clocks_sm_mhz),
    # ECC, retired pages, remapped rows, slowdown reasons (sim/health.py: what a fault makes them)
    **{name: (name, "", functools.partial(_health, name)) for name in HEALTH_FIELDS},
}
GPU_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "persistence.mode": "persistence_mode",
    "clocks.current.sm": "clocks.sm",
    "power.draw.instant": "power.draw",
}

APP_FIELDS: dict[str, tuple[str, str, Callable[[Any], object]]] = {
    "pid": ("pid", "", lambda r: r[1].pid),
    "process_name": ("process_name", "", lambda r: r[1].process.name),
    "gpu_uuid": ("gpu_uuid", "", lambda r: r[0].gpu.uuid),
    "gpu_name": ("gpu_name", "", lambda r: r[0].gpu.name),
    "gpu_bus_id": ("gpu_bus_id", "", lambda r: r[0].gpu.pci_bus_id),
    "gpu_serial": ("gpu_serial", "", lambda r: None),
    "used_memory": ("used_gpu_memory", "MiB", lambda r: r[1].process.used_memory_mib),
}
APP_ALIASES = {"name": "process_name", "used_gpu_memory": "used_memory"}


def cell(value: object, unit: str, nounits: bool, marker: str | None = None) -> str:
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


def gpu_field_keys(names: Sequence[str], driver: str = "") -> list[str]:
    """The field keys `names` ask ``--query-gpu`` for; UnknownField for the first unknown
    (to `driver`: a field newer than its generation is unknown, see sim/generations.py)."""
    keys = []
    for name in names:
        key = GPU_ALIASES.get(name, name)
        if key not in GPU_FIELDS or unknown_field(name, driver) or unknown_field(key, driver):
            raise UnknownField(name)
        keys.append(key)
    return keys


def query_gpu_csv(
    snap: Any, names: Sequence[str], *, noheader: bool = False, nounits: bool = False
) -> str:
    """``--query-gpu=NAMES --format=csv[,noheader][,nounits]``."""
    driver = str(getattr(snap.config, "driver_version", ""))
    specs = [(key, GPU_FIELDS[key]) for key in gpu_field_keys(names, driver)]
    rows = [
        [
            cell(get(snap, g), unit, nounits, g.gpu.unavailable.get(key))
            for key, (_, unit, get) in specs
        ]
        for g in snap.gpus
    ]
    return _lines([_header(header, unit) for _, (header, unit, _) in specs], rows, noheader)


def app_specs(names: Sequence[str]) -> list[tuple[str, str, Callable[[Any], object]]]:
    """The specs of the fields `names` ask ``--query-compute-apps`` for."""
    specs = []
    for name in names:
        key = APP_ALIASES.get(name, name)
        if key not in APP_FIELDS:
            raise UnknownField(name)
        specs.append(APP_FIELDS[key])
    return specs


def query_apps_csv(
    snap: Any, names: Sequence[str], *, noheader: bool = False, nounits: bool = False
) -> str:
    """``--query-compute-apps=NAMES --format=csv[,noheader][,nounits]``."""
    specs = app_specs(names)
    rows = [[cell(get(row), unit, nounits) for _, unit, get in specs] for row in snap.rows()]
    return _lines([_header(header, unit) for header, unit, _ in specs], rows, noheader)


def list_gpus(snap: Any) -> str:
    """``-L``: one line per GPU, MIG slices indented below."""
    out = []
    for g in snap.gpus:
        out.append(f"GPU {g.gpu.index}: {g.gpu.name} (UUID: {g.gpu.uuid})\n")
        for i, mig in enumerate(g.gpu.mig):
            out.append(f"  MIG {mig.profile:<11} Device {i:>2}: (UUID: {mig.uuid})\n")
    return "".join(out)
