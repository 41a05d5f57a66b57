"""Reading `nvidia-smi topo -m`: the link between each pair of GPUs, each GPU's CPU and NUMA
affinity. NIC rows and columns, the legend and the 'GPU NUMA ID' column are skipped.

The matrix is printed with tabs (sometimes re-spaced when pasted); every cell is one word, and
the affinity columns follow the device columns: CPU affinity ('0-31,64-95'), then NUMA
affinity ('0'; a range such as '0-1' or 'N/A' is no single node), then (newer drivers) the
GPU NUMA ID.
"""

from __future__ import annotations

import re

from ...model.topology import PCIE_KINDS, GpuPlace, Topology, TopologyError, is_nvlink

COMMAND = "nvidia-smi topo -m"
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\w+|ib\w+|CPU\d+)$")
_GPU = re.compile(r"^GPU(\d+)$")
_KINDS = frozenset(("X", *PCIE_KINDS, "SOC", "PXN"))
# Newer drivers colour the matrix on a terminal (and some captures keep it): SGR escapes.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _valid(cell: str) -> bool:
    return cell in _KINDS or is_nvlink(cell)


def parse_topology(text: str) -> Topology:
    """The topology in `nvidia-smi topo -m` output; TopologyError if none can be read."""
    lines = [line for line in _ANSI.sub("", text).splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if header is None:
        raise TopologyError("no 'GPU0 GPU1 …' header line in the topo -m output")
    devices: list[str] = []
    words = lines[header].split()
    for word in words:
        if not _DEVICE.match(word):
            break
        devices.append(word)
    extras = " ".join(words[len(devices) :])
    has_cpu, has_numa = "CPU Affinity" in extras, "NUMA Affinity" in extras
    places: list[GpuPlace] = []
    cells: dict[int, list[str]] = {}
    for line in lines[header + 1 :]:
        parts = line.split()
        found = _GPU.match(parts[0]) if parts else None
        if found is None:
            if parts and parts[0] == "Legend:":
                break
            continue
        index = int(found.group(1))
        row = parts[1 : 1 + len(devices)]
        if len(row) < len(devices) or not all(_valid(c) for c in row):
            raise TopologyError(f"GPU{index}'s row does not have {len(devices)} link cells")
        rest = parts[1 + len(devices) :]
        cpus = rest[0] if has_cpu and rest and rest[0] != "N/A" else None
        numa_text = rest[1] if has_numa and len(rest) > 1 else ""
        numa = int(numa_text) if numa_text.isdigit() else None
        places.append(GpuPlace(index, cpus, numa))
        cells[index] = row
    if not places:
        raise TopologyError("no GPU rows in the topo -m output")
    columns = {int(m.group(1)): n for n, d in enumerate(devices) if (m := _GPU.match(d))}
    links: dict[tuple[int, int], str] = {}
    for a, row in cells.items():
        for b, column in columns.items():
            if a < b and b in cells:
                links[(a, b)] = row[column]
    return Topology(tuple(sorted(places, key=lambda p: p.index)), links)
