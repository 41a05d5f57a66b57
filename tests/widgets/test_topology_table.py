"""The dashboard's topology table from GET hosts' `topology` (the real samples' layouts)."""

from __future__ import annotations

from pathlib import Path

from jupyter_gpuhive.hosts.vendors.nvidia_topology import parse_topology
from jupyter_gpuhive.widgets.topology_table import NVLINK, topology_table

SAMPLES = Path(__file__).parents[1] / "samples" / "topo"


def _host(name: str, sample: str | None) -> dict:
    spec = parse_topology((SAMPLES / sample).read_text()).to_json() if sample else None
    return {"name": name, "gpus": [], "topology": spec}


def test_matrix_affinity_and_nvlink_groups() -> None:
    hosts = [_host("pairs", "nvlink-pairs-4gpu.txt"), _host("pcie", "pcie-two-numa.txt"),
             _host("new", None)]  # fmt: skip
    page = topology_table(hosts)
    assert "<b>pairs</b> — NVLink groups: {0, 1}, {2, 3}" in page
    assert page.count(f"background:{NVLINK}'>NV4<") == 4  # 0-1 and 2-3, both ways
    assert "24-47,72-95" in page and "8-15,24-31" in page
    assert "<b>pcie</b> — NVLink groups: none" in page and ">SYS<" in page
    assert "No topology reported by: new." in page
    only = topology_table(hosts, lambda name: name == "pcie")
    assert "pairs" not in only and "pcie" in only
