"""`nvidia-smi topo -m`: the real samples, the stand-in's layouts, storing what a host reports,
showing it in GET hosts, and NVLink / NUMA requests answered from it."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.bookings.finder import SlotSearch
from jupyter_gpuhive.bookings.reservations import Policy
from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.hosts.vendors.nvidia_topology import TopologyError, parse_topology
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity
from jupyter_gpuhive.model.finder import Want
from jupyter_gpuhive.model.topology import Topology
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset, write_config
from jupyter_gpuhive.sim.nvidia_smi import main as nvidia_smi
from jupyter_gpuhive.store import Store
from tests.protection.conftest import local_decl
from tests.sim.conftest import shared_dir  # noqa: F401

SAMPLES = Path(__file__).parents[1] / "samples" / "topo"


def sample(name: str) -> Topology:
    return parse_topology((SAMPLES / name).read_text())


def test_dgx_a100_nvswitch() -> None:
    topo = sample("dgx-a100-nvswitch.txt")
    assert [p.index for p in topo.gpus] == list(range(8))
    assert topo.link(0, 7) == "NV12" and topo.link(3, 3) == "X"
    assert topo.nvlink_cliques() == [frozenset(range(8))]
    assert [topo.numa(i) for i in range(8)] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert topo.gpus[0].cpus == "48-63,176-191"
    assert len(topo.links) == 28  # NIC columns are not GPU links


def test_four_gpus_in_nvlink_pairs() -> None:
    topo = sample("nvlink-pairs-4gpu.txt")
    assert topo.link(0, 1) == "NV4" and topo.link(2, 3) == "NV4" and topo.link(1, 2) == "SYS"
    assert topo.nvlink_cliques() == [frozenset({0, 1}), frozenset({2, 3})]
    assert topo.numa_groups() == [frozenset({0, 1}), frozenset({2, 3})]
    assert topo.gpus[2].cpus == "24-47,72-95"


def test_pcie_only_two_numa_nodes() -> None:
    topo = sample("pcie-two-numa.txt")
    assert all(len(c) == 1 for c in topo.nvlink_cliques())
    assert topo.numa_groups() == [frozenset({1, 2, 3, 4}), frozenset({0})]
    assert topo.link(1, 2) == "PHB" and topo.link(1, 3) == "NODE" and topo.link(0, 4) == "SYS"


@pytest.mark.parametrize(
    "text",
    ["", "No devices were found\n", "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n",
     "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tBOGUS\t0-3\n"],
)  # fmt: skip
def test_what_is_not_a_matrix_is_refused(text: str) -> None:
    with pytest.raises(TopologyError):
        parse_topology(text)


@pytest.mark.parametrize(
    ("layout", "cliques", "nodes"),
    [
        ("nvswitch", [{0, 1, 2, 3}], [{2, 3}, {0, 1}]),
        ("nvlink-pairs", [{0, 1}, {2, 3}], [{0, 1}, {2, 3}]),
        ("pcie-2numa", [{0}, {1}, {2}, {3}], [{0, 1}, {2, 3}]),
        (None, [{0}, {1}, {2}, {3}], [{0, 1, 2, 3}]),
    ],
)
def test_stand_in_prints_each_layout(
    tmp_path: Path, layout: str | None, cliques: list[set[int]], nodes: list[set[int]]
) -> None:
    config = preset("a100x4", "topo-host")
    config.topology = layout
    path = write_config(tmp_path / "host.json", config)
    out = io.StringIO()
    assert nvidia_smi(["topo", "-m"], {"GPUHIVE_SIM_CONFIG": str(path)}, out) == 0
    assert out.getvalue().startswith("\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity")
    topo = parse_topology(out.getvalue())
    assert topo.nvlink_cliques() == [frozenset(c) for c in cliques]
    assert topo.numa_groups() == [frozenset(n) for n in nodes]


def test_stand_in_refuses_an_unknown_layout(tmp_path: Path) -> None:
    config = preset("a100x4", "topo-host")
    config.topology = "hypercube"
    path = write_config(tmp_path / "host.json", config)
    assert nvidia_smi(["topo", "-m"], {"GPUHIVE_SIM_CONFIG": str(path)}, io.StringIO()) == 1


def _run() -> Callable:
    executor = ThreadPoolExecutor(2)

    async def run(fn: Callable, *args: object) -> object:
        return await asyncio.get_running_loop().run_in_executor(executor, lambda: fn(*args))

    return run


def test_monitor_reads_stores_and_shows_the_topology(
    tmp_path: Path,
    shared_dir: Path,  # noqa: F811
) -> None:
    config = preset("a100x4", "topo-sim")
    config.topology = "nvlink-pairs"
    host = LocalSimHost("topo-sim", shared_dir / "topo-sim", config)
    decl = local_decl(host)
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    try:
        store.inventory.sync([decl])
        pool = HostPool([decl])
        monitor = Monitor(store, pool, _run(), **unwired(pool))

        async def scenario() -> list[dict]:
            await monitor.topology.after_sweep(["topo-sim"], [])
            shown = await monitor.hosts()
            await pool.close()
            return shown

        shown = asyncio.run(scenario())
        stored = store.topology.get("topo-sim")
        assert stored is not None
        assert stored.nvlink_cliques() == [frozenset({0, 1}), frozenset({2, 3})]
        entry = next(h for h in shown if h["name"] == "topo-sim")
        assert entry["topology"]["nvlink_groups"] == [[0, 1], [2, 3]]
        assert {"a": 0, "b": 1, "kind": "NV4"} in entry["topology"]["links"]
        again = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()  # read back from the db
        assert again.topology.get("topo-sim") == stored
        again.close()
    finally:
        store.close()


def test_nvlink_and_numa_requests_use_the_topology(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    try:
        store.inventory.sync([
            HostDecl(name, transport="local",
                     gpus=tuple(GpuDecl(i, f"GPU-{name}-{i}", "A100", 81920) for i in range(n)))
            for name, n in (("dgx", 8), ("pairs", 4), ("pcie", 5))
        ])  # fmt: skip
        for name, file in (("dgx", "dgx-a100-nvswitch.txt"), ("pairs", "nvlink-pairs-4gpu.txt"),
                           ("pcie", "pcie-two-numa.txt")):  # fmt: skip
            assert store.topology.put(name, sample(file))
        search = SlotSearch(store, Policy(ZoneInfo("UTC")), lambda: None)
        start = int((datetime.now(UTC) + timedelta(days=1)).timestamp())
        who = Identity("alice")

        def hosts(**ask: object) -> list[tuple[str, ...]]:
            want = Want(duration=3600, not_before=start, deadline=0, limit=10, **ask)  # type: ignore[arg-type]
            return [tuple(u.ref for u in s.units) for s in search.search(who, want)[1]]

        assert hosts(count=4, nvlink=True) == [("dgx:0", "dgx:1", "dgx:2", "dgx:3")]
        # one answer per host at one instant; the host with fewer free GPUs first
        assert hosts(count=2, nvlink=True) == [("pairs:0", "pairs:1"), ("dgx:0", "dgx:1")]
        assert hosts(count=4, same_numa=True) == [("pcie:1", "pcie:2", "pcie:3", "pcie:4")]
        assert hosts(count=3, nvlink=True, host="pairs") == []
        assert hosts(count=2, nvlink=True, same_numa=True, host="dgx") == [("dgx:0", "dgx:1")]
    finally:
        store.close()
