"""Parse nvidia-smi output: query CSV (by header names), ``-q -x`` XML and ``-L``.

Every failure is an `NvsmiParseError` (or its `NvsmiDriverError` for a failed driver) with a
reason a person can read; callers never see an unrelated exception from bad output.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from ...model.gpus import GpuMetrics, GpuReadError, GpuToolError, MigDevice
from .nvidia_fields import driver_state, placeholder_reason

# The query a probe should send; GpuMetrics reads these (and a few more) by name.
QUERY_GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "fan.speed",
)
# No process_name: nvidia-smi prints names unquoted, so a name with a newline or ", " could
# end a line or forge one. Names and owners come from `ps`, which escapes them.
QUERY_APPS_FIELDS = ("pid", "gpu_uuid", "used_memory")

# Header names (units stripped) that differ from the field a query names.
FIELD_ALIASES = {
    "gpu_name": "name",
    "clocks.current.sm": "clocks.sm",
    "used_gpu_memory": "used_memory",
    "persistence.mode": "persistence_mode",
}
DRIVER_FAILURES = (
    "NVIDIA-SMI has failed",
    "couldn't communicate with the NVIDIA driver",
    "No devices were found",
    "Unable to determine the device handle",
    "Failed to initialize NVML",
    "Driver/library version mismatch",
)
# The metric fields whose placeholders GpuMetrics.unreported names (with the reason).
METRIC_FIELDS = (*QUERY_GPU_FIELDS[3:], "power.limit", "persistence_mode", "mig.mode.current")
# field names carry capitals since R590 (`pci.baseClass`, `...heterogenous_multivGPU`)
_HEADER_CELL = re.compile(r"^[a-z][A-Za-z0-9_.]*( \[[A-Za-z%/]+\])?$")
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)(?: ?(?:%|MiB|W|C|MHz|KiB|GiB))?$")


class NvsmiParseError(GpuReadError):
    """nvidia-smi output could not be read; `reason` says why and where."""


class NvsmiDriverError(NvsmiParseError, GpuToolError):
    """nvidia-smi ran but reported that it cannot reach the driver or any GPU (`state`: which
    failure, see nvidia_fields.driver_state)."""

    state: str | None = None  # None: a failure no known state names


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU (with MIG: the parent GPU's UUID plus instance ids)."""

    pid: int
    gpu_uuid: str | None
    process_name: str | None
    used_memory_mib: int | None
    gpu_bus_id: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class NvsmiReport:
    """Everything ``nvidia-smi -q -x`` says: driver, GPUs and their processes."""

    driver_version: str | None
    cuda_version: str | None
    timestamp: str | None
    gpus: tuple[GpuMetrics, ...]
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True)
class GpuListing:
    """One line of ``nvidia-smi -L`` with its MIG lines."""

    index: int
    name: str
    uuid: str
    mig: tuple[MigDevice, ...] = ()


def check_driver(text: str, exit_status: int | None = None) -> None:
    """Raise NvsmiDriverError when the output or a non-zero exit status says nvidia-smi failed."""
    found = None
    if any(marker in text for marker in DRIVER_FAILURES) or exit_status:
        found = driver_state(text)
    if found is not None:
        error = NvsmiDriverError(found.message)
        error.state = found.state
        raise error
    if exit_status:
        first = text.strip().splitlines()[0] if text.strip() else "no output"
        raise NvsmiDriverError(f"nvidia-smi exited with status {exit_status}: {first}")


def field_name(header: str) -> str:
    """The field a header cell names: units dropped, aliases resolved."""
    name = header.strip().split(" [", 1)[0].strip()
    return FIELD_ALIASES.get(name, name)


def _is_header(cells: list[str]) -> bool:
    return all(_HEADER_CELL.match(c) for c in cells) and not all(c.isdigit() for c in cells)


def parse_csv(
    text: str, fields: Sequence[str] | None = None, *, strict: bool = True
) -> list[dict[str, str | None]]:
    """Rows of a ``--format=csv`` answer as {field: value, None for a placeholder}."""
    return [
        {n: None if placeholder_reason(c) else c for n, c in row.items()}
        for row in raw_csv(text, fields, strict=strict)
    ]


def raw_csv(
    text: str, fields: Sequence[str] | None = None, *, strict: bool = True
) -> list[dict[str, str]]:
    """Rows of a ``--format=csv`` answer as {field: raw cell}, read by header names.

    Without a header line (``noheader``) the caller names the `fields` it asked for. Lines end
    at "\n" only. Not `strict`, a line with the wrong number of fields is left out.
    """
    check_driver(text)
    lines = [(n, ln.rstrip("\r")) for n, ln in enumerate(text.split("\n"), 1) if ln.strip()]
    if not lines:
        return []
    first = [c.strip() for c in lines[0][1].split(", ")]
    if _is_header(first):
        names = [field_name(c) for c in first]
        lines = lines[1:]
    elif fields:
        names = [field_name(f) for f in fields]
    else:
        raise NvsmiParseError("no CSV header and no field list given", lines[0][0], lines[0][1])
    rows = []
    for number, line in lines:
        cells = [c.strip() for c in line.split(", ")]
        if len(cells) > len(names) and "process_name" in names:
            at = names.index("process_name")  # a process name containing ", "
            extra = len(cells) - len(names)
            cells[at : at + extra + 1] = [", ".join(cells[at : at + extra + 1])]
        if len(cells) != len(names):
            if not strict:
                continue
            raise NvsmiParseError(
                f"expected {len(names)} CSV fields, got {len(cells)}", number, line
            )
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def _number(value: str | None, what: str, line: int | None = None) -> float | None:
    if value is None:
        return None
    match = _NUMBER.match(value.strip())
    if not match:
        raise NvsmiParseError(f"{what} is not a number: {value!r}", line)
    return float(match.group(1))


def _int(value: str | None, what: str, line: int | None = None) -> int | None:
    number = _number(value, what, line)
    return None if number is None else int(number)


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    return {"enabled": True, "disabled": False}.get(value.strip().lower())


def _required(row: dict[str, str | None], name: str, line: int) -> str:
    value = row.get(name)
    if value is None:
        raise NvsmiParseError(f"the {name!r} field is missing or N/A", line)
    return value


def parse_query_gpu(text: str, fields: Sequence[str] | None = None) -> list[GpuMetrics]:
    """GPUs from a ``--query-gpu`` CSV answer (index and uuid must be among the fields)."""
    gpus = []
    for n, raw in enumerate(raw_csv(text, fields), 1):
        reasons = {f: r for f in METRIC_FIELDS if (r := placeholder_reason(raw.get(f, "x")))}
        row = {f: None if placeholder_reason(c) else c for f, c in raw.items()}
        index = _int(_required(row, "index", n), "index", n)
        gpus.append(
            GpuMetrics(
                index=index or 0,
                uuid=_required(row, "uuid", n),
                name=row.get("name"),
                util_gpu=_int(row.get("utilization.gpu"), "utilization.gpu", n),
                util_mem=_int(row.get("utilization.memory"), "utilization.memory", n),
                mem_used_mib=_int(row.get("memory.used"), "memory.used", n),
                mem_total_mib=_int(row.get("memory.total"), "memory.total", n),
                temperature_c=_int(row.get("temperature.gpu"), "temperature.gpu", n),
                power_w=_number(row.get("power.draw"), "power.draw", n),
                fan_pct=_int(row.get("fan.speed"), "fan.speed", n),
                power_limit_w=_number(row.get("power.limit"), "power.limit", n),
                pci_bus_id=row.get("pci.bus_id"),
                persistence_mode=_flag(row.get("persistence_mode")),
                mig_enabled=_flag(row.get("mig.mode.current")),
                unreported=tuple(reasons.items()),
            )
        )
    return gpus


def parse_compute_apps(text: str, fields: Sequence[str] | None = None) -> list[GpuProcess]:
    """Processes from a ``--query-compute-apps`` CSV answer (pid must be among the fields).

    A line that cannot be read costs that line only: one process, never the host's others.
    """
    procs = []
    for n, row in enumerate(parse_csv(text, fields, strict=False), 1):
        try:
            pid = _int(_required(row, "pid", n), "pid", n)
            used = _int(row.get("used_memory"), "used_memory", n)
        except NvsmiParseError:
            continue
        if pid is None or pid <= 0:
            continue
        procs.append(
            GpuProcess(
                pid=pid,
                gpu_uuid=row.get("gpu_uuid"),
                process_name=row.get("process_name"),
                used_memory_mib=used,
                gpu_bus_id=row.get("gpu_bus_id"),
            )
        )
    return procs


_LIST_GPU = re.compile(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9A-Fa-f-]+)\)$")
_LIST_MIG = re.compile(r"^MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)$")


def parse_gpu_list(text: str) -> list[GpuListing]:
    """GPUs and MIG slices from ``nvidia-smi -L``."""
    check_driver(text)
    result: list[GpuListing] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if gpu := _LIST_GPU.match(line):
            result.append(GpuListing(int(gpu.group(1)), gpu.group(2), gpu.group(3)))
        elif (mig := _LIST_MIG.match(line)) and result:
            last = result[-1]
            device = MigDevice(
                index=int(mig.group(2)),
                gpu_instance_id=None,
                compute_instance_id=None,
                mem_used_mib=None,
                mem_total_mib=None,
                uuid=mig.group(3),
                profile=mig.group(1),
            )
            result[-1] = GpuListing(last.index, last.name, last.uuid, (*last.mig, device))
        else:
            raise NvsmiParseError("not an nvidia-smi -L line", number, raw)
    return result


def _text(elem: ET.Element | None, *paths: str) -> str | None:
    """The stripped text at the first of `paths` under `elem` that exists; None when N/A."""
    if elem is None:
        return None
    for path in paths:
        found = elem.find(path)
        if found is not None:
            value = (found.text or "").strip()
            return None if placeholder_reason(value) else value
    return None


def _xml_mig(gpu: ET.Element) -> tuple[MigDevice, ...]:
    devices = []
    for i, dev in enumerate(gpu.findall("mig_devices/mig_device")):
        index = _int(_text(dev, "index"), "mig_device index")
        devices.append(
            MigDevice(
                index=i if index is None else index,
                gpu_instance_id=_int(_text(dev, "gpu_instance_id"), "gpu_instance_id"),
                compute_instance_id=_int(_text(dev, "compute_instance_id"), "compute_instance_id"),
                mem_used_mib=_int(_text(dev, "fb_memory_usage/used"), "MIG memory used"),
                mem_total_mib=_int(_text(dev, "fb_memory_usage/total"), "MIG memory total"),
                multiprocessor_count=_int(
                    _text(dev, "device_attributes/shared/multiprocessor_count"),
                    "multiprocessor_count",
                ),
            )
        )
    return tuple(devices)


def _xml_gpu(index: int, gpu: ET.Element) -> tuple[GpuMetrics, list[GpuProcess]]:
    uuid = _text(gpu, "uuid")
    if uuid is None:
        raise NvsmiParseError(f"GPU {index} in the XML log has no <uuid>")
    power = gpu.find("gpu_power_readings")
    power = gpu.find("power_readings") if power is None else power
    bus_id = _text(gpu, "pci/pci_bus_id") or gpu.get("id")
    metrics = GpuMetrics(
        index=index,
        uuid=uuid,
        name=_text(gpu, "product_name"),
        util_gpu=_int(_text(gpu, "utilization/gpu_util"), "gpu_util"),
        util_mem=_int(_text(gpu, "utilization/memory_util"), "memory_util"),
        mem_used_mib=_int(_text(gpu, "fb_memory_usage/used"), "memory used"),
        mem_total_mib=_int(_text(gpu, "fb_memory_usage/total"), "memory total"),
        temperature_c=_int(_text(gpu, "temperature/gpu_temp"), "gpu_temp"),
        power_w=_number(
            _text(power, "power_draw", "instant_power_draw", "average_power_draw"), "power_draw"
        ),
        fan_pct=_int(_text(gpu, "fan_speed"), "fan_speed"),
        power_limit_w=_number(_text(power, "power_limit", "current_power_limit"), "power_limit"),
        pci_bus_id=bus_id,
        persistence_mode=_flag(_text(gpu, "persistence_mode")),
        mig_enabled=_flag(_text(gpu, "mig_mode/current_mig")),
        mig=_xml_mig(gpu),
    )
    procs = []
    for info in gpu.findall("processes/process_info"):
        pid = _int(_text(info, "pid"), "pid")
        if pid is None:
            raise NvsmiParseError(f"a process on GPU {uuid} has no pid")
        procs.append(
            GpuProcess(
                pid=pid,
                gpu_uuid=uuid,
                process_name=_text(info, "process_name"),
                used_memory_mib=_int(_text(info, "used_memory"), "used_memory"),
                gpu_bus_id=bus_id,
                gpu_instance_id=_int(_text(info, "gpu_instance_id"), "gpu_instance_id"),
                compute_instance_id=_int(_text(info, "compute_instance_id"), "compute_instance_id"),
            )
        )
    return metrics, procs


def _refuse_markup(text: str) -> None:
    """nvidia-smi never prints comments, CDATA, entities or a second prolog: text with any is
    a process name (printed unescaped) trying to hide or forge elements."""
    body = text[text.find("<nvidia_smi_log") :] if "<nvidia_smi_log" in text else text
    if "<!ENTITY" in text:
        raise NvsmiParseError("refusing XML that declares entities")
    for mark in ("<!--", "<![CDATA[", "<!DOCTYPE", "<?"):
        anywhere = mark in ("<!--", "<![CDATA[")  # the others: once, in the prolog
        if mark in (text if anywhere else body) or text.count(mark) > 1:
            raise NvsmiParseError(f"refusing nvidia-smi XML with {mark!r} in it")


def _refuse_moved_blocks(root: ET.Element) -> None:
    """A name that closes elements early can move real blocks: refuse more `<gpu>` blocks than
    `<attached_gpus>`, and a process entry anywhere but in its GPU's one `<processes>`."""
    blocks = root.findall("gpu")
    attached = (root.findtext("attached_gpus") or "").strip()
    if attached.isdigit() and len(blocks) > int(attached):  # fewer: a GPU left out (lost)
        raise NvsmiParseError(f"{len(blocks)} <gpu> blocks for {attached} attached GPUs")
    for gpu in blocks:
        lists = gpu.findall("processes")
        listed = sum(len(x.findall("process_info")) for x in lists)
        if len(lists) > 1 or sum(1 for _ in gpu.iter("process_info")) != listed:
            raise NvsmiParseError("a process entry outside its GPU's <processes>")
        for info in gpu.iter("process_info"):
            if any(len(child) for child in info) or len({c.tag for c in info}) != len(info):
                raise NvsmiParseError("a process entry with nested or repeated elements")


def parse_query_xml(text: str) -> NvsmiReport:
    """GPUs (with MIG devices) and processes from ``nvidia-smi -q -x``."""
    check_driver(text)
    _refuse_markup(text)
    try:
        # Safe here: expat never fetches the external DTD, and entity declarations are refused.
        root = ET.fromstring(text)  # noqa: S314
    except (ET.ParseError, ValueError) as exc:
        raise NvsmiParseError(f"not valid nvidia-smi XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise NvsmiParseError(f"unexpected XML root <{root.tag}>, wanted <nvidia_smi_log>")
    _refuse_moved_blocks(root)
    gpus: list[GpuMetrics] = []
    procs: list[GpuProcess] = []
    for index, elem in enumerate(root.findall("gpu")):
        metrics, gpu_procs = _xml_gpu(index, elem)
        gpus.append(metrics)
        procs.extend(gpu_procs)
    return NvsmiReport(
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        timestamp=_text(root, "timestamp"),
        gpus=tuple(gpus),
        processes=tuple(procs),
    )
