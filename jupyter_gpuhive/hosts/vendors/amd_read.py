"""AMD's sections of a probe answer as neutral readings: amd-smi's JSON, or rocm-smi's.

amd-smi (ROCm 6) prints lists of per-GPU objects keyed by `gpu` (the index): `list` (BDF,
UUID), `static` (name, ASIC serial, VRAM size, power limit), `metric` (activity, VRAM,
power, temperatures, RAS/ECC counts, throttle status) and `process` (each GPU's processes
with PID and VRAM). A reading may be `{"value", "unit"}`, a bare number, or "N/A" (older
releases and missing sensors): all three are read, "N/A" as not reported. rocm-smi (ROCm 5)
prints `cardN` objects of strings (`GPU ID` became `Device ID` at ROCm 6.0.2) and processes
under `system` as `PID<n>` entries, without the GPU they use.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ...model.gpus import DEGRADED, FAILED, GpuMetrics, Health, ProcessReading, VendorReading
from ...model.topology import GpuPlace, Topology, TopologyError

UNITS_MIB = {"B": 1 / (1024 * 1024), "KB": 1 / 1024, "MB": 1, "MIB": 1, "GB": 1024, "GIB": 1024}


def number(value: Any, to_mib: bool = False) -> float | None:
    """A reading's number (None when not reported); with `to_mib`, in MiB by its unit."""
    unit = ""
    if isinstance(value, dict):
        value, unit = value.get("value"), str(value.get("unit", ""))
    if isinstance(value, bool) or value is None:
        return None
    words = str(value).split()
    try:
        found = float(words[0])
    except (ValueError, IndexError):
        return None  # "N/A", "[Not Supported]", ""
    if not unit and len(words) > 1:
        unit = words[1]  # the text view's "7.3 GB"
    return found * UNITS_MIB.get(unit.upper(), 1) if to_mib else found


def _int(value: Any, to_mib: bool = False) -> int | None:
    found = number(value, to_mib)
    return None if found is None else round(found)


def unframed(text: str) -> str:
    """A section's text without the '|' the probe put before each line of a process list."""
    lines = text.splitlines()
    if lines and all(line.startswith("|") for line in lines if line):
        lines = [line[1:] for line in lines]
    return "\n".join(lines)


def loads(text: str) -> Any:
    """The JSON document in a tool's answer, after any warning lines it printed first."""
    lines = unframed(text).splitlines()
    failed: ValueError | None = None
    for start, line in enumerate(lines):
        if line.lstrip()[:1] not in ("[", "{"):
            continue
        try:  # what follows the document (a capture's closing fence) is not part of it
            return json.JSONDecoder().raw_decode("\n".join(lines[start:]))[0]
        except ValueError as error:  # a warning such as "[WARN] …": the next line may start it
            failed = failed or error
    raise failed or ValueError(f"no JSON in the answer: {text.strip()[:120]!r}")


def by_gpu(text: str, what: str) -> dict[int, dict[str, Any]]:
    """amd-smi's list of per-GPU objects, by index (ValueError when it is not one)."""
    data = loads(text)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError(f"amd-smi {what}: not a list of GPUs")
    return {int(item["gpu"]): item for item in data if isinstance(item, dict) and "gpu" in item}


# amd-smi list's UUID holds the ASIC serial: 2 hex digits, 'ff', the device id, '-0000-1000-80',
# 2 more digits, '-', the last 12 (afff74a1-0000-1000-8054-e92b0a5d57c8: 0xaf54e92b0a5d57c8).
_LISTED_UUID = re.compile(r"^([0-9a-f]{2})ff[0-9a-f]{4}-0000-1000-80([0-9a-f]{2})-([0-9a-f]{12})$")


def serial_of_uuid(uuid: str) -> str | None:
    """The ASIC serial inside amd-smi list's UUID, if it holds one."""
    found = _LISTED_UUID.match(uuid.strip().lower())
    return "".join(found.groups()) if found else None


def uuid_of(static: dict[str, Any], bdf: str | None = None) -> str:
    """The GPU's UUID as ROCR_VISIBLE_DEVICES takes it: `GPU-` and the ASIC serial's (rocm-smi:
    the Unique ID's) 16 hex digits; where there is none (Radeon cards report N/A), a name made
    from the PCI bus address, which identifies the GPU but cannot pin it."""
    serial = str((static.get("asic") or {}).get("asic_serial", "")).strip().lower()
    serial = serial.removeprefix("0x") or serial_of_uuid(str(static.get("uuid", ""))) or ""
    if len(serial) >= 8 and all(c in "0123456789abcdef" for c in serial):
        return "GPU-" + serial
    bus = bdf or (static.get("bus") or {}).get("bdf") or f"gpu{static.get('gpu', '?')}"
    return f"amd-pci-{str(bus).lower()}"


def unreported(
    usage: dict[str, Any], temps: dict[str, Any], power: dict[str, Any]
) -> tuple[tuple[str, str], ...]:
    """(reading, why) of each of utilisation, temperature and power amd-smi left out."""
    readings = (
        ("utilization.gpu", usage.get("gfx_activity")),
        ("temperature.gpu", temps.get("edge", temps.get("hotspot"))),
        ("power.draw", power.get("socket_power")),
    )
    return tuple((name, "not reported by amd-smi") for name, v in readings if number(v) is None)


def health_of(metric: dict[str, Any]) -> Health:
    """RAS/ECC counts and throttle status as a health state."""
    ecc = metric.get("ecc") or {}
    bad = _int(ecc.get("total_uncorrectable_count")) or 0
    deferred = _int(ecc.get("total_deferred_count")) or 0
    power = metric.get("power") or {}
    if bad:
        return Health(FAILED, (f"{bad} uncorrectable RAS/ECC error(s) since the driver loaded",))
    reasons = []
    if deferred:
        reasons.append(f"{deferred} deferred RAS/ECC error(s)")
    if str(power.get("throttle_status", "")).upper() == "THROTTLED":
        temp = _int((metric.get("temperature") or {}).get("hotspot"))
        reasons.append("clocks throttled" + (f" at a {temp} C junction" if temp else ""))
    return Health(DEGRADED, tuple(reasons)) if reasons else Health()


def read_amd_smi(sections: dict[str, tuple[int, str]]) -> VendorReading:
    """The `amdstatic`, `amdmetric` and `amdprocess` sections."""
    for name in ("amdstatic", "amdmetric"):
        status, text = sections.get(name, (1, ""))
        if status != 0:
            return VendorReading(error=f"amd-smi failed ({status}): {text.strip()[:200]}")
    static = by_gpu(sections["amdstatic"][1], "static")
    metric = by_gpu(sections["amdmetric"][1], "metric")
    gpus: list[GpuMetrics] = []
    health: dict[str, Health] = {}
    uuids: dict[int, str] = {}
    procs: list[ProcessReading] = []
    for index in sorted(static):
        st, me = static[index], metric.get(index, {})
        uuid = uuid_of(st)
        if uuid in uuids.values():  # compute partitions (CPX, DPX) share their GPU's serial
            uuid = f"{uuid}-part{index}"
        uuids[index] = uuid
        usage, mem = me.get("usage") or {}, me.get("mem_usage") or {}
        temps, power = me.get("temperature") or {}, me.get("power") or {}
        temp = _int(temps.get("edge"))
        gpus.append(
            GpuMetrics(
                index, uuid, (st.get("asic") or {}).get("market_name"),
                _int(usage.get("gfx_activity")), _int(usage.get("umc_activity")),
                _int(mem.get("used_vram"), True),
                _int(mem.get("total_vram"), True) or _int((st.get("vram") or {}).get("size"), True),
                temp if temp is not None else _int(temps.get("hotspot")),
                number(power.get("socket_power")), None,
                power_limit_w=number((st.get("limit") or {}).get("max_power")),
                pci_bus_id=(st.get("bus") or {}).get("bdf"),
                unreported=unreported(usage, temps, power),
            )
        )  # fmt: skip
        health[uuid] = health_of(me)
    status, text = sections.get("amdprocess", (1, ""))
    if status == 0 and text.strip():
        procs = processes_of(by_gpu(text, "process"), uuids)
    return VendorReading(gpus=tuple(gpus), processes=tuple(procs), health=health)


def processes_of(listed: dict[int, dict[str, Any]], uuids: dict[int, str]) -> list[ProcessReading]:
    """amd-smi's processes per GPU (JSON's `process_list`, the text view's repeated
    PROCESS_INFO, or `process_info_<n>` keys) with PID, GPU and VRAM."""
    procs = []
    for index, item in listed.items():
        infos = [e.get("process_info") if isinstance(e, dict) else None
                 for e in item.get("process_list") or []]  # fmt: skip
        for key, found in item.items():  # `process_info`, numbered in some releases
            if str(key).startswith("process_info"):
                infos += found if isinstance(found, list) else [found]
        for info in infos:
            if not isinstance(info, dict) or _int(info.get("pid")) is None:
                continue  # "No running processes detected" and the like
            vram = (info.get("memory_usage") or {}).get("vram_mem", info.get("mem_usage"))
            procs.append(ProcessReading(int(info["pid"]), uuids.get(index), _int(vram, True)))
    return procs


ROCM_READINGS = (
    ("utilization.gpu", "GPU use (%)"),
    ("power.draw", "Average Graphics Package Power (W)"),
)


def _vram(card: dict[str, Any], what: str) -> Any:
    """A VRAM reading of a card ('VRAM …'; ROCm 3 wrote 'vram …')."""
    return card.get(f"VRAM {what}", card.get(f"vram {what}"))


def read_rocm_smi(status: int, text: str) -> VendorReading:
    """rocm-smi's `--showpids --json` (ROCm 5): GPUs, and processes without their GPU
    unless the host has only one."""
    if status != 0:
        return VendorReading(error=f"rocm-smi failed ({status}): {text.strip()[:200]}")
    data = loads(text)
    if not isinstance(data, dict):
        raise ValueError("rocm-smi: not an object of cards")
    cards = sorted(
        (int(key[4:]), value)
        for key, value in data.items()
        if key[:4] == "card" and key[4:].isdigit()
    )
    gpus = []
    for index, card in cards:
        bus = str(card.get("PCI Bus") or f"card{index}")
        uuid = uuid_of({"asic": {"asic_serial": card.get("Unique ID", "")}}, bus)
        name = card.get("Device Name") or card.get("Card series") or card.get("Card model")
        gpus.append(
            GpuMetrics(
                index, uuid, name,
                _int(card.get("GPU use (%)")), _int(card.get("GPU memory use (%)")),
                _int({"value": _vram(card, "Total Used Memory (B)"), "unit": "B"}, True),
                _int({"value": _vram(card, "Total Memory (B)"), "unit": "B"}, True),
                _int(card.get("Temperature (Sensor edge) (C)")),
                number(card.get("Average Graphics Package Power (W)")), None,
                pci_bus_id=card.get("PCI Bus"),
                unreported=tuple(
                    (f, "not reported by rocm-smi")
                    for f, key in ROCM_READINGS
                    if number(card.get(key)) is None
                ),
            )
        )  # fmt: skip
    only = gpus[0].uuid if len(gpus) == 1 else None
    procs = []
    for key, value in (data.get("system") or {}).items():
        if key.startswith("PID") and key[3:].isdigit():
            fields = str(value).rsplit(", ", 4)
            vram = _int({"value": fields[2], "unit": "B"}, True) if len(fields) == 5 else None
            procs.append(ProcessReading(int(key[3:]), only, vram))
    return VendorReading(gpus=tuple(gpus), processes=tuple(procs))


def read_sections(sections: dict[str, tuple[int, str]]) -> VendorReading:
    """amd-smi's sections, or rocm-smi's where the host has no amd-smi; a reading that
    cannot be parsed is the host's GPU error, with its reason."""
    try:
        if "rocmsmi" in sections:
            return read_rocm_smi(*sections["rocmsmi"])
        return read_amd_smi(sections)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return VendorReading(error=f"cannot read the AMD tool's answer: {error}")


_LINKS = {"XGMI": "XGMI", "PCIE": "PHB"}  # amd-smi's link types as gpuhive's kinds
_ROCM_LINK = "(Topology) Link type between DRM devices "


def parse_topology(text: str) -> Topology:
    """The links in `amd-smi topology --json` (or rocm-smi's `--showtopotype --json`): XGMI
    is a direct GPU link (as NVLink), PCIe one through a host bridge (PHB)."""
    try:
        data = loads(text)
    except ValueError as error:
        raise TopologyError(str(error)) from None
    links: dict[tuple[int, int], str] = {}
    if isinstance(data, list):
        for item in data:
            a = int(item["gpu"])
            for key, kind in (item.get("link_type") or {}).items():
                b = int(str(key).removeprefix("gpu_"))
                if a != b and str(kind).upper() in _LINKS:
                    links[(min(a, b), max(a, b))] = _LINKS[str(kind).upper()]
        indices = {int(item["gpu"]) for item in data}
    elif isinstance(data, dict):
        for values in data.values():
            for key, kind in values.items() if isinstance(values, dict) else ():
                if str(key).startswith(_ROCM_LINK) and str(kind).upper() in _LINKS:
                    a, _, b = key[len(_ROCM_LINK) :].partition(" and ")
                    links[(int(a), int(b))] = _LINKS[str(kind).upper()]
        indices = {i for pair in links for i in pair}
    else:
        indices = set()
    if not indices:
        raise TopologyError("no GPUs in the AMD tool's topology answer")
    return Topology(tuple(GpuPlace(i) for i in sorted(indices)), links)


def text_view(text: str) -> list[dict[str, Any]]:
    """amd-smi's text view (`GPU: 0` then indented `KEY: value` lines) as its JSON's shape:
    per-GPU objects, keys in lower case, a key seen again under one parent (PROCESS_INFO) a
    list, a line without a key (a list wrapped at 80 columns) joined to the value before."""
    gpus: list[dict[str, Any]] = []
    stack: list[tuple[int, dict[str, Any]]] = []
    last: tuple[dict[str, Any], str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("$ "):
            continue
        indent = len(raw) - len(raw.lstrip())
        key, sep, value = line.partition(":")
        if not sep or " " in key.strip():
            if last is not None and isinstance(last[0].get(last[1]), str):
                last[0][last[1]] += " " + line
            continue
        key, value = key.strip().lower(), value.strip()
        if indent == 0 and key == "gpu" and value.isdigit():
            stack = [(0, {"gpu": int(value)})]
            gpus.append(stack[0][1])
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            continue
        parent = stack[-1][1]
        child: Any = value if value else {}
        if key in parent:
            held = parent[key]
            parent[key] = [*(held if isinstance(held, list) else [held]), child]
        else:
            parent[key] = child
        if isinstance(child, dict):
            stack.append((indent, child))
        last = (parent, key) if isinstance(child, str) else None
    return gpus


_ROCM_LINE = re.compile(r"^GPU\[(\d+)\]\s*: (.*)$")


_ROCM_PID = re.compile(r"^PID (\d+) is using \d+ DRM device")


def rocm_text(text: str) -> dict[str, dict[str, str]]:
    """rocm-smi's `GPU[i] : key: value` lines (`-a`, `--showtoponuma`, ...) as its JSON's
    `cardN` objects, and its `PID n is using …` lines as `system`'s `PID<n>` entries."""
    cards: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        pid = _ROCM_PID.match(line.strip())
        if pid:
            cards.setdefault("system", {})[f"PID{pid[1]}"] = ""
        found = _ROCM_LINE.match(line.strip())
        if found:
            key, sep, value = found[2].partition(": ")
            card = cards.setdefault(f"card{found[1]}", {})
            if sep and key.strip():
                card.setdefault(key.strip(), value.strip())
    return cards
