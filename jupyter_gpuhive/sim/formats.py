"""Render a host snapshot in nvidia-smi's formats: query CSV, ``-q -x`` XML and ``-L``.

Standard library only. The query CSV and ``-L`` live in ``query`` (shared with the stand-in's
fast path) and are re-exported here.
"""

from __future__ import annotations

import time

from .core import NA
from .generations import major, xml_names
from .health import health_nodes
from .health import temperature as fault_temperature
from .query import APP_ALIASES as APP_ALIASES
from .query import APP_FIELDS as APP_FIELDS
from .query import GPU_ALIASES as GPU_ALIASES
from .query import GPU_FIELDS as GPU_FIELDS
from .query import UnknownField as UnknownField
from .query import list_gpus as list_gpus
from .query import query_apps_csv as query_apps_csv
from .query import query_gpu_csv as query_gpu_csv
from .snapshot import GpuState, HostSnapshot

DRIVER_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
DRIVER_FAILURE_EXIT = 9


def escape(text: str) -> str:
    """XML-escape text (xml.sax.saxutils would import urllib: too slow for every call)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Raw(str):
    """Element text printed as is: a process name where the config says the driver does not
    escape them (`raw_names`, the threat model's assumption)."""


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


# --- -q -x ------------------------------------------------------------------------------

Node = tuple[str, "str | list[Node]"]


def _xml(node: Node, depth: int) -> list[str]:
    """Lines of one element, tab-indented like nvidia-smi (empty lists keep open/close tags)."""
    tag, content = node
    pad = "\t" * depth
    if isinstance(content, str):
        text = content if isinstance(content, Raw) else escape(content)
        return [f"{pad}<{tag}>{text}</{tag}>"]
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
    raw = bool(getattr(snap.config, "raw_names", False))
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
                    ("process_name", Raw(row.process.name) if raw else row.process.name),
                    ("used_memory", f"{row.process.used_memory_mib} MiB"),
                ],
            )
        )
    names = xml_names(snap.config.driver_version)  # this driver generation's element names
    power = None if "power.draw" in off else g.power_w
    temperature: list[Node] = [("gpu_temp", _na(fault_temperature(gpu, g.temperature_c), "C"))]
    full = bool(gpu.fault or snap.config.health_elements)
    if full:
        temperature += [("gpu_temp_max_threshold", "92 C"), ("gpu_temp_slow_threshold", "89 C")]
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
        # a healthy GPU prints as the samples do (they hold no health elements), unless the
        # config asks for them (`health_elements`); a fault adds them
        *(health_nodes(gpu, major(snap.config.driver_version)) if full else []),
        ("temperature", temperature),
        (
            str(names["power"]),
            [(str(names["draw"]), _na(power, "W")), ("power_limit", _na(gpu.power_limit_w, "W"))],
        ),
        ("processes", procs),
    ]
    bus_id = escape(gpu.pci_bus_id).replace('"', "&quot;")
    lines = [f'\t<gpu id="{bus_id}">']
    for child in children:
        if child[0] in ("mig_mode", "mig_devices") and not names["mig_mode"]:
            continue  # before R450: no MIG elements at all
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
        f'<!DOCTYPE nvidia_smi_log SYSTEM "{xml_names(snap.config.driver_version)["dtd"]}">',
        "<nvidia_smi_log>",
        f"\t<timestamp>{stamp}</timestamp>",
        f"\t<driver_version>{escape(snap.config.driver_version)}</driver_version>",
        f"\t<cuda_version>{escape(snap.config.cuda_version)}</cuda_version>",
        f"\t<attached_gpus>{len(snap.config.gpus)}</attached_gpus>",
    ]
    for g in snap.gpus:
        lines += _gpu_xml(snap, g)
    return "\n".join([*lines, "</nvidia_smi_log>"]) + "\n"
