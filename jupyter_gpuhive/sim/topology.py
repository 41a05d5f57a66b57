"""`nvidia-smi topo -m` for a simulated host, in the real format (tab-separated matrix, CPU and
NUMA affinity, 'GPU NUMA ID', legend). Standard library only.

The layout is the host config's `topology`: a preset name, or an explicit layout
``{"links": [[...], ...], "numa": [...], "cpus": [...]}`` (a full matrix of cells such as
"X", "NV12", "PHB", "SYS"; one NUMA node and one CPU list per GPU). Presets, after the samples
in tests/samples/topo/ (real outputs):

- ``nvswitch``: every pair NV12 (DGX A100); GPU pairs on NUMA nodes 3, 1, 7, 5 as on a DGX A100;
- ``nvlink-pairs``: GPUs 0-1, 2-3, ... NV4; each pair on its own NUMA node (0, 1, 0, 1 ...),
  SYS across nodes, PHB within one;
- ``pcie-2numa``: no NVLink; the first half on NUMA node 0, the rest on node 1; PHB within a
  node, SYS across;
- ``pcie`` (the default): no NVLink, one NUMA node, PHB between every pair.

Format facts taken from real output: the header and row layout, cell words, the legend text
and the trailing 'GPU NUMA ID' column (N/A without a GPU memory NUMA node). Inferred: the CPU
lists of the presets (8 CPUs per NUMA node).
"""

from __future__ import annotations

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes \
(e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges \
within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
PRESETS = ("nvswitch", "nvlink-pairs", "pcie-2numa", "pcie")
_DGX_NUMA = (3, 3, 1, 1, 7, 7, 5, 5)


class TopologyConfigError(ValueError):
    """The configured layout cannot be printed."""


def layout(count: int, spec: object) -> tuple[list[list[str]], list[int], list[str]]:
    """(matrix, NUMA node per GPU, CPU list per GPU) of `count` GPUs for a config's spec."""
    if isinstance(spec, dict):
        links = spec.get("links")
        numa = spec.get("numa") or [0] * count
        cpus = spec.get("cpus") or [_cpus(n) for n in numa]
        if not isinstance(links, list) or len(links) != count or len(numa) != count:
            raise TopologyConfigError(f"the topology needs a {count}x{count} 'links' matrix")
        return [[str(c) for c in row] for row in links], [int(n) for n in numa], list(cpus)
    name = spec or "pcie"
    if name not in PRESETS:
        raise TopologyConfigError(f"unknown topology {name!r}; choose one of {', '.join(PRESETS)}")
    if name == "nvswitch":
        numa = [_DGX_NUMA[i % 8] for i in range(count)]
    elif name == "nvlink-pairs":
        numa = [(i // 2) % 2 for i in range(count)]
    elif name == "pcie-2numa":
        numa = [0 if i < (count + 1) // 2 else 1 for i in range(count)]
    else:
        numa = [0] * count
    matrix = [[_cell(name, a, b, numa) for b in range(count)] for a in range(count)]
    return matrix, numa, [_cpus(n) for n in numa]


def _cell(name: str, a: int, b: int, numa: list[int]) -> str:
    if a == b:
        return "X"
    if name == "nvswitch":
        return "NV12"
    if name == "nvlink-pairs" and a // 2 == b // 2:
        return "NV4"
    return "PHB" if numa[a] == numa[b] else "SYS"


def _cpus(node: int) -> str:
    return f"{node * 8}-{node * 8 + 7}"


def topo_matrix(count: int, spec: object) -> str:
    """The text `nvidia-smi topo -m` prints for `count` GPUs laid out as `spec`."""
    matrix, numa, cpus = layout(count, spec)
    names = [f"GPU{i}" for i in range(count)]
    lines = ["\t" + "\t".join([*names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i, row in enumerate(matrix):
        cells = "\t".join(f" {c} " if c == "X" else c for c in row)
        lines.append(f"{names[i]}\t{cells}\t{cpus[i]}\t{numa[i]}\t\tN/A")
    return "\n".join(lines) + "\n" + LEGEND
