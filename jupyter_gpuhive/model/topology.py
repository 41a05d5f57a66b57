"""A host's GPU topology as a value: how each pair of GPUs is connected (as the vendor's
tool reports it), each GPU's CPU and NUMA affinity, and the groups a request for connected
GPUs may use.

Link kinds, best first: ``NV#`` (# bonded NVLinks) or ``XGMI`` (AMD's Infinity Fabric),
``PIX`` (at most one PCIe bridge), ``PXB`` (several PCIe bridges), ``PHB`` (a PCIe host
bridge), ``NODE`` (host bridges within one NUMA node), ``SYS`` (across NUMA nodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

PCIE_KINDS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def is_nvlink(kind: str) -> bool:
    """Whether a link kind is a direct GPU-to-GPU link: NVLink ('NV4', 'NV12', 'NV18', ...)
    or AMD's Infinity Fabric ('XGMI'), which the finder's `nvlink` groups both mean."""
    return kind == "XGMI" or (kind.startswith("NV") and kind[2:].isdigit())


class TopologyError(ValueError):
    """A vendor tool's answer holds no topology that can be read."""


@dataclass(frozen=True)
class GpuPlace:
    """Where one GPU sits: its CPU affinity (as printed, e.g. '0-31,64-95') and NUMA node."""

    index: int
    cpus: str | None = None
    numa: int | None = None


@dataclass(frozen=True)
class Topology:
    """The GPUs of one host and the link between each pair (keys: (low index, high index))."""

    gpus: tuple[GpuPlace, ...]
    links: Mapping[tuple[int, int], str] = field(default_factory=dict)
    _memo: dict[str, list[frozenset[int]]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def link(self, a: int, b: int) -> str | None:
        """The link kind between GPUs `a` and `b` ('X' for a GPU with itself)."""
        if a == b:
            return "X"
        return self.links.get((min(a, b), max(a, b)))

    def numa(self, index: int) -> int | None:
        """The NUMA node of GPU `index`, if known."""
        for place in self.gpus:
            if place.index == index:
                return place.numa
        return None

    def nvlink_cliques(self) -> list[frozenset[int]]:
        """The maximal sets of GPUs in which every pair is NVLink-connected (singletons too)."""
        if "cliques" not in self._memo:
            self._memo["cliques"] = self._cliques()
        return self._memo["cliques"]

    def _cliques(self) -> list[frozenset[int]]:
        indices = [p.index for p in self.gpus]
        near = {i: {j for j in indices if j != i and is_nvlink(self.link(i, j) or "")}
                for i in indices}  # fmt: skip
        found: list[frozenset[int]] = []

        def grow(clique: set[int], pool: set[int], done: set[int]) -> None:  # Bron-Kerbosch
            if not pool and not done:
                found.append(frozenset(clique))
                return
            for v in sorted(pool):
                grow(clique | {v}, pool & near[v], done & near[v])
                pool = pool - {v}
                done = done | {v}

        grow(set(), set(indices), set())
        return sorted(found, key=lambda c: (min(c), len(c)))

    def numa_groups(self) -> list[frozenset[int]]:
        """GPUs grouped by NUMA node (GPUs of unknown node left out)."""
        groups: dict[int, set[int]] = {}
        for place in self.gpus:
            if place.numa is not None:
                groups.setdefault(place.numa, set()).add(place.index)
        return [frozenset(groups[n]) for n in sorted(groups)]

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [{"index": p.index, "cpu_affinity": p.cpus, "numa": p.numa}
                     for p in self.gpus],
            "links": [{"a": a, "b": b, "kind": kind}
                      for (a, b), kind in sorted(self.links.items())],
            "nvlink_groups": [sorted(c) for c in self.nvlink_cliques() if len(c) > 1],
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Topology:
        """The value `to_json` wrote (as stored)."""
        gpus = tuple(
            GpuPlace(int(g["index"]), g.get("cpu_affinity"), g.get("numa"))
            for g in data.get("gpus", ())
        )
        links = {(int(x["a"]), int(x["b"])): str(x["kind"]) for x in data.get("links", ())}
        return cls(gpus, links)


def groups_for(
    topology: Topology | None, indices: Iterable[int], *, nvlink: bool, same_numa: bool
) -> list[frozenset[int]] | None:
    """The maximal GPU index sets of one host within which any choice satisfies the
    constraints; None when they need a topology the host has not reported."""
    every = frozenset(indices)
    if not nvlink and not same_numa:
        return [every]
    if topology is None:
        return None
    key = f"groups {nvlink} {same_numa} {sorted(every)}"
    if key not in topology._memo:
        topology._memo[key] = _groups(topology, every, nvlink, same_numa)
    return topology._memo[key]


def _groups(
    topology: Topology, every: frozenset[int], nvlink: bool, same_numa: bool
) -> list[frozenset[int]]:
    groups = [every]
    if nvlink:
        groups = [g & c for g in groups for c in topology.nvlink_cliques()]
    if same_numa:
        groups = [g & n for g in groups for n in topology.numa_groups()]
    kept = {g for g in groups if g}
    return sorted((g for g in kept if not any(g < h for h in kept)), key=sorted)


def pairs(indices: Iterable[int]) -> Iterable[tuple[int, int]]:
    """Every unordered pair of `indices` (low, high)."""
    return combinations(sorted(indices), 2)
