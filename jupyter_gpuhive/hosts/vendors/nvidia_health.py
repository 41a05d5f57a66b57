"""GPU health from what nvidia-smi reports: ``--query-gpu`` counters and "device handle" errors.

The probe reads health from `--query-gpu` fields (`health_from_csv`): ECC counters, retired
pages, remapped rows and slowdown reasons, all filled by the driver. ``-q -x`` also carries
process names, which a user picks and a driver may print unescaped, so it never decides health
(`parse_health` reads it for `jupyter gpuhive doctor`'s report only).

Each GPU is ``ok``, ``degraded`` (usable, but an admin should look: pages pending retirement,
thermal slowdown, past uncorrectable errors) or ``failed`` (not bookable: uncorrectable ECC
errors since the driver loaded, a row-remapping failure, a GPU nvidia-smi cannot reach). The
reasons are sentences a user can read. Both driver generations' element names are read
(``sram_``/``dram_`` counters or ``double_bit/total``; ``clocks_event_reasons`` or
``clocks_throttle_reasons``).
"""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ...model.gpus import DEGRADED as DEGRADED
from ...model.gpus import FAILED as FAILED
from ...model.gpus import OK as OK
from ...model.gpus import Health
from .nvidia_smi import NvsmiParseError, parse_csv

# "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error" (Xid 79) and
# "... for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU".
LOST = re.compile(
    r"Unable to determine the device handle for GPU ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f]): (.+)"
)


def _at(elem: ET.Element | None, path: str) -> ET.Element | None:
    """The element at a plain 'a/b' path: one C-level find per step (a path with '/' would
    go through ElementPath's Python code, the most of this parser's time)."""
    for tag in path.split("/"):
        if elem is None:
            return None
        elem = elem.find(tag)
    return elem


def _int(elem: ET.Element | None, path: str) -> int:
    found = _at(elem, path)
    text = (found.text or "").strip().split(" ")[0] if found is not None else ""
    return int(text) if text.isdigit() else 0


def _yes(elem: ET.Element | None, path: str) -> bool:
    found = _at(elem, path)
    return found is not None and (found.text or "").strip() in ("Yes", "Active")


def _uncorrectable(section: ET.Element | None) -> int:
    """Uncorrectable ECC errors in a ``volatile`` or ``aggregate`` section (both layouts)."""
    if section is None:
        return 0
    new = _int(section, "sram_uncorrectable") + _int(section, "dram_uncorrectable")
    return new or _int(section, "double_bit/total")


def _ecc(volatile: int, aggregate: int, failed: list[str], degraded: list[str]) -> None:
    """The verdict on uncorrectable ECC errors since the driver loaded and in the GPU's life."""
    if volatile:
        failed.append(
            f"{volatile} uncorrectable ECC error(s) since the driver loaded; "
            "the GPU needs a reset (and a check) before use"
        )
    elif aggregate:
        degraded.append(f"{aggregate} uncorrectable ECC error(s) in the GPU's history")


@dataclass(frozen=True)
class Findings:
    """What one ``<gpu>`` element says, the temperature apart (it comes with every sweep's
    CSV query; the rest changes only when something happens to the GPU)."""

    failed: tuple[str, ...] = ()
    degraded: tuple[str, ...] = ()
    slowdowns: tuple[str, ...] = ()  # active thermal slowdown reasons, as words
    slow_threshold_c: int = 0  # 0: not reported
    temperature_c: int | None = None  # the XML's own reading, where the probe kept it

    def judge(self, temperature_c: int | None = None) -> Health:
        """The health at `temperature_c` (default: the XML's reading)."""
        temp = self.temperature_c if temperature_c is None else temperature_c
        degraded = list(self.degraded)
        if self.slowdowns:
            at = f" at {temp} C" if temp is not None else ""
            degraded.append(f"clocks slowed down ({', '.join(self.slowdowns)}){at}")
        elif self.slow_threshold_c and temp is not None and temp >= self.slow_threshold_c:
            degraded.append(
                f"{temp} C, at or above the slowdown threshold of {self.slow_threshold_c} C"
            )
        if self.failed:
            return Health(FAILED, self.failed + tuple(degraded))
        return Health(DEGRADED, tuple(degraded)) if degraded else Health()


def findings(gpu: ET.Element) -> Findings:
    """What one ``<gpu>`` element of ``-q -x`` shows."""
    failed: list[str] = []
    degraded: list[str] = []
    ecc = gpu.find("ecc_errors")
    volatile = _uncorrectable(ecc.find("volatile") if ecc is not None else None)
    aggregate = _uncorrectable(ecc.find("aggregate") if ecc is not None else None)
    _ecc(volatile, aggregate, failed, degraded)
    pages = gpu.find("retired_pages")
    if _yes(pages, "pending_retirement") or _yes(pages, "pending_blacklist"):
        degraded.append("memory pages are pending retirement: reset the GPU")
    retired = _int(pages, "double_bit_retirement/retired_count")
    retired += _int(pages, "multiple_single_bit_retirement/retired_count")
    if retired:
        degraded.append(f"{retired} memory page(s) retired")
    rows = gpu.find("remapped_rows")
    if _yes(rows, "remapped_row_failure"):
        failed.append("row remapping failed: the GPU's memory needs service")
    elif _yes(rows, "remapped_row_pending"):
        degraded.append("remapped rows are pending: reset the GPU")
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
    slow = tuple(
        child.tag.rsplit("_reason_", 1)[-1].replace("_", " ")
        for child in (reasons if reasons is not None else ())
        if "thermal" in child.tag and (child.text or "").strip() == "Active"
    )
    reading = _at(gpu, "temperature/gpu_temp")
    return Findings(
        tuple(failed),
        tuple(degraded),
        slow,
        _int(gpu, "temperature/gpu_temp_slow_threshold"),
        _int(gpu, "temperature/gpu_temp") if reading is not None else None,
    )


def parse_health(
    text: str,
    known: Collection[str] | None = None,
    temperatures: Mapping[str, int | None] | None = None,
) -> dict[str, Health]:
    """{GPU UUID: Health} from ``nvidia-smi -q -x`` (lines before the XML are skipped), at
    the temperatures given by UUID (the CSV query's; else the XML's own reading).

    The XML also carries process names, which a user chooses. So only the log's own `<gpu>`
    children count, only for GPUs in `known` (the CSV query's), and a GPU that appears twice,
    or more `<gpu>` blocks than `<attached_gpus>` says, is trusted for nothing: a forged block
    could otherwise mark another user's GPU failed (or hide a failure).

    The probe sends only the lines health reads, and those change only when something happens
    to a GPU; so the reading of one text is kept (`_read`, by the text itself) and a sweep of
    healthy hosts parses no XML."""
    found = _read(text, None if known is None else frozenset(known))
    temps = temperatures or {}
    return {uuid: seen.judge(temps.get(uuid)) for uuid, seen in found}


@functools.lru_cache(maxsize=4096)
def _read(text: str, known: frozenset[str] | None) -> tuple[tuple[str, Findings], ...]:
    start = text.find("<?xml")
    start = text.find("<nvidia_smi_log") if start < 0 else start
    if start < 0 or "<!--" in text or "<![CDATA[" in text:  # nvidia-smi prints neither:
        return ()  # a process name hiding real blocks
    try:
        root = ET.fromstring(text[start:])  # noqa: S314 - nvidia-smi output, no DTD resolved
    except ET.ParseError:
        return ()
    blocks = root.findall("gpu")
    attached = (root.findtext("attached_gpus") or "").strip()
    if attached.isdigit() and len(blocks) > int(attached):
        return ()
    uuids = [(gpu.findtext("uuid") or "").strip() for gpu in blocks]
    return tuple(
        (uuid, findings(gpu))
        for uuid, gpu in zip(uuids, blocks, strict=True)
        if uuid and uuids.count(uuid) == 1 and (known is None or uuid in known)
    )


def lost_gpus(text: str) -> tuple[tuple[str, str], ...]:
    """(PCI bus id, message) of each GPU nvidia-smi could not reach, from any of its outputs."""
    return tuple((m[1].upper(), m[0].strip()) for m in LOST.finditer(text))


def without_lost(text: str) -> str:
    """nvidia-smi's output without its "device handle" lines (the other GPUs' rows stay)."""
    return "\n".join(line for line in text.split("\n") if not LOST.search(line))


def _count(row: Mapping[str, str | None], name: str) -> int:
    value = (row.get(name) or "").strip()
    return int(value) if value.isdigit() else 0


def _row_yes(row: Mapping[str, str | None], name: str) -> bool:
    return (row.get(name) or "").strip() in ("Yes", "Active")


def row_findings(row: Mapping[str, str | None]) -> Findings:
    """What one GPU's ``--query-gpu`` health fields show (nvidia_probe.HEALTH_QUERY)."""
    failed: list[str] = []
    degraded: list[str] = []
    volatile = _count(row, "ecc.errors.uncorrected.volatile.total")
    aggregate = _count(row, "ecc.errors.uncorrected.aggregate.total")
    _ecc(volatile, aggregate, failed, degraded)
    if _row_yes(row, "retired_pages.pending"):
        degraded.append("memory pages are pending retirement: reset the GPU")
    retired = _count(row, "retired_pages.double_bit.count")
    retired += _count(row, "retired_pages.single_bit_ecc.count")
    if retired:
        degraded.append(f"{retired} memory page(s) retired")
    if _row_yes(row, "remapped_rows.failure"):
        failed.append("row remapping failed: the GPU's memory needs service")
    elif _row_yes(row, "remapped_rows.pending"):
        degraded.append("remapped rows are pending: reset the GPU")
    slow = tuple(
        name.rsplit(".", 1)[-1].replace("_", " ")
        for name in sorted(row)
        if "_reasons." in name and "thermal" in name and _row_yes(row, name)
    )
    return Findings(tuple(failed), tuple(degraded), slow)


def health_from_csv(
    text: str,
    known: Collection[str] | None = None,
    temperatures: Mapping[str, int | None] | None = None,
) -> dict[str, Health]:
    """{GPU UUID: Health} from the probe's health query (``--query-gpu`` CSV with a header).

    Every field is one the driver fills; no process name or other text a user writes is in
    this answer. A GPU listed twice, or not in `known` (the metrics query's), counts for
    nothing. An unreadable answer is no health (never an exception)."""
    found = _read_csv(text, None if known is None else frozenset(known))
    temps = temperatures or {}
    return {uuid: seen.judge(temps.get(uuid)) for uuid, seen in found}


@functools.lru_cache(maxsize=1024)
def _read_csv(text: str, known: frozenset[str] | None) -> tuple[tuple[str, Findings], ...]:
    try:
        rows = parse_csv(text, strict=False)
    except NvsmiParseError:
        return ()
    uuids = [row.get("uuid") or "" for row in rows]
    return tuple(
        (uuid, row_findings(row))
        for uuid, row in zip(uuids, rows, strict=True)
        if uuid and uuids.count(uuid) == 1 and (known is None or uuid in known)
    )
