"""nvidia-smi's human-readable outputs: `-q` (the text log), `--version` and `nvlink -s`.

gpuhive's probe never reads them (it asks the CSV queries); `jupyter gpuhive doctor` and a site's
pasted outputs do, so the identity they show (driver, GPUs by UUID, name and memory, process
PIDs, NVLink links) is read by the same rules as the CSV and XML: a placeholder is not a value,
and every line that is not understood is skipped, never an error for the others.
"""

from __future__ import annotations

import re

from ...model.gpus import GpuMetrics
from .nvidia_fields import placeholder_reason
from .nvidia_smi import GpuProcess, NvsmiReport, check_driver

_KEY = re.compile(r"^( *)([^:]+?)\s*:\s*(.*)$")
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_MIB = re.compile(r"^(\d+) MiB$")
# R610 deprecates the driver version for the kernel driver's ("KMD"): "DRIVER version :
# Deprecated, see ..." beside "KMD version : 610.57.04"; `-q` adds "[Deprecated; ...]"
_VERSION = re.compile(r"^(?:DRIVER|KMD) version\s*:\s*(\d[\w.-]*)", re.MULTILINE | re.IGNORECASE)
_NUMBER = re.compile(r"^\d[\w.-]*")
_LINK_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9A-Za-z-]+)\)\s*$")
_LINK = re.compile(r"^\s+Link (\d+): (.+)$")


def _value(text: str) -> str | None:
    return None if placeholder_reason(text) else text.strip()


def parse_query_text(text: str) -> NvsmiReport:
    """Driver, GPUs (UUID, name, total memory) and processes (PID, memory) from `nvidia-smi -q`."""
    check_driver(text)
    driver = cuda = stamp = None
    gpus: list[dict[str, str | None]] = []
    procs: list[GpuProcess] = []
    block: list[str] = []  # the headings above the line, by depth
    for raw in text.splitlines():
        line = raw.rstrip()
        if _GPU.match(line):
            gpus.append({"bus": _GPU.match(line)[1]})  # type: ignore[index]
            block = []
            continue
        key = _KEY.match(line)
        if key is None:
            depth = (len(line) - len(line.lstrip())) // 4
            if line.strip():
                block = [*block[: max(depth - 1, 0)], line.strip()]
            continue
        depth, name, value = len(key[1]) // 4, key[2], key[3]
        block = block[: max(depth - 1, 0)]
        if not gpus:
            number = _NUMBER.match(value.strip())
            if name in ("Driver Version", "KMD Version") and number:
                driver = number[0]
            cuda = value if name == "CUDA Version" else cuda
            stamp = value if name == "Timestamp" else stamp
            continue
        gpu = gpus[-1]
        if depth == 1 and name in ("Product Name", "GPU UUID"):
            gpu[name] = _value(value)
        elif block[:1] == ["FB Memory Usage"] and name == "Total":
            gpu["Total"] = _value(value)
        elif block[:1] == ["Processes"] and name == "Process ID" and value.strip().isdigit():
            procs.append(GpuProcess(int(value), gpu.get("GPU UUID"), None, None, gpu["bus"]))
        elif block[:1] == ["Processes"] and name == "Used GPU Memory" and procs:
            used = _MIB.match(value.strip())
            if used and procs[-1].used_memory_mib is None:
                last = procs[-1]
                procs[-1] = GpuProcess(last.pid, last.gpu_uuid, None, int(used[1]), last.gpu_bus_id)
    metrics = []
    for index, gpu in enumerate(gpus):
        total = _MIB.match(gpu.get("Total") or "")
        metrics.append(
            GpuMetrics(
                index=index,
                uuid=gpu.get("GPU UUID") or "",
                name=gpu.get("Product Name"),
                util_gpu=None,
                util_mem=None,
                mem_used_mib=None,
                mem_total_mib=int(total[1]) if total else None,
                temperature_c=None,
                power_w=None,
                fan_pct=None,
                pci_bus_id=gpu["bus"],
            )
        )
    return NvsmiReport(driver, cuda, stamp, tuple(metrics), tuple(procs))


def parse_version(text: str) -> str | None:
    """The driver version `nvidia-smi --version` names (None when it names none)."""
    found = _VERSION.search(text)
    return found[1] if found else None


def parse_nvlink_status(text: str) -> dict[str, tuple[str, int]]:
    """{GPU UUID: (name, active links)} from `nvidia-smi nvlink -s` (a link reported
    '<inactive>' or a GPU without NVLink counts 0)."""
    check_driver(text)
    found: dict[str, tuple[str, int]] = {}
    current = None
    for line in text.splitlines():
        gpu = _LINK_GPU.match(line)
        if gpu:
            current = gpu[3]
            found[current] = (gpu[2], 0)
        elif current and (link := _LINK.match(line)) and "inactive" not in link[2]:
            name, count = found[current]
            found[current] = (name, count + 1)
    return found
