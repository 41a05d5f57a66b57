"""Shares in the magics, against a real server in its own process over a real sshd host whose
GPUs are shareable: `%gpureserve 1 --share` / `--memory` packs onto the fullest GPU,
`%gpustatus` says who holds which share and how much their real processes use, and
`%%gpujob --memory` makes a share job whose tasks carry the caps."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from jupyter_gpuhive.sim.cluster import SshdCluster, ensure_user
from tests.support.server import Client, JupyterServer, magics_shell
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="processes of a real test user")

OWNER = "hivejob1"
USERS = {"tok-owner": {"name": OWNER}, "tok-bob": {"name": "bob"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[JupyterServer, Any]]:
    """A real server monitoring a real sshd host with four shareable simulated GPUs."""
    ensure_user(OWNER)
    root = tmp_path_factory.mktemp("magic-shares")
    name = f"ms{os.getpid() % 10000}"
    with SshdCluster([name]) as cluster:
        cluster.add_user(OWNER)
        host = next(iter(cluster))
        config = {
            "db_url": f"sqlite:///{root / 'hive.sqlite'}",
            "hosts": [{"name": "gpu1", "address": host.address, "port": host.port,
                       "user": OWNER, "shareable": True}],
            "ssh_key": str(cluster.client_key), "known_hosts": [str(cluster.known_hosts)],
            "poll_interval": 0.5, "min_reservation": "1m", "site_timezone": "UTC",
        }  # fmt: skip
        srv = JupyterServer(config, USERS)
        client = Client(srv.port, "tok-owner")

        def discovered() -> bool:  # the 4 simulated GPUs, with their memory
            status, body, _ = client.call("GET", "hosts")
            gpus = body["hosts"][0]["gpus"] if status == 200 else []
            return len(gpus) == 4 and all(g.get("memory_mib") for g in gpus)

        wait_for(discovered, 30, "discovery of the 4 simulated GPUs", interval=0.3)
        yield srv, (cluster, name)
        srv.stop()


@pytest.fixture
def shell(
    server: tuple[JupyterServer, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Any:
    return magics_shell(server[0].port, "tok-owner", monkeypatch, tmp_path)


def test_shares_are_packed_shown_with_their_use_and_capped_in_jobs(
    shell: Any, server: tuple[JupyterServer, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, (cluster, name) = server
    bob = Client(srv.port, "tok-bob")
    status, held, _ = bob.call("POST", "reservations", {"title": "bob's", "gpus": ["gpu1:3"],
                                                        "duration": "20m", "share": 0.5})  # fmt: skip
    assert status == 201, held
    mine = shell.run_line_magic("gpureserve", "1 --share 0.25 --for 20m --no-pin")
    assert mine["gpus"] == ["gpu1:3"] and mine["share"] == 0.25  # the fullest GPU it fits on
    quarter_gib = mine["share_memory_mib"] // 1024
    again = shell.run_line_magic("gpureserve", f"1 --memory {quarter_gib}G --for 20m --no-pin")
    assert again["gpus"] == ["gpu1:3"]  # still room there: whole GPUs 0-2 stay free
    with pytest.raises(UsageError, match="A share is of one GPU"):
        shell.run_line_magic("gpureserve", "2 --share 0.25 --for 20m --no-pin")
    with pytest.raises(UsageError, match="either --share or --memory"):
        shell.run_line_magic("gpureserve", "1 --share 0.25 --memory 8G --no-pin")

    proc = cluster.start_gpu_process(name, [3], user=OWNER, mem_mib=3000)
    try:

        def seen() -> bool:
            return "uses 3000 MiB" in _text(shell.run_line_magic("gpustatus", ""))

        wait_for(seen, 20, "the process in %gpustatus", interval=0.5)
    finally:
        proc.kill()
        proc.wait()
    lines = [line for line in _text(shell.run_line_magic("gpustatus", "")).splitlines()
             if line.startswith("gpu1:3 shares:")]  # fmt: skip
    assert len(lines) == 1
    assert lines[0].startswith(f"gpu1:3 shares: {OWNER} 0.5 (")  # mine first, both summed
    assert "bob 0.5 (" in lines[0] and lines[0].endswith("; free 0")

    # Pinned to a share, this kernel is capped to it too (before any framework is imported).
    for name in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "PYTORCH_CUDA_ALLOC_CONF", "GPUHIVE_SHARE",
                 "GPUHIVE_SHARE_MIB", "TF_FORCE_GPU_ALLOW_GROWTH"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)  # restored after the test
    pinned = shell.run_line_magic("gpureserve", "gpu1:2 --share 0.5 --for 20m")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == pinned["gpu_uuids"][0]
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == os.environ["GPUHIVE_SHARE"] == "0.5"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "per_process_memory_fraction:0.5"
    assert os.environ["GPUHIVE_SHARE_MIB"] == str(pinned["share_memory_mib"])
    assert "capped to its share: XLA_PYTHON_CLIENT_MEM_FRACTION=0.5" in _text(pinned)

    preview = shell.run_cell_magic("gpujob", "gpu1:0 --memory 8G --dry-run", "python train.py")
    env = preview[0]["env"]
    assert env["GPUHIVE_SHARE_MIB"] == "8192" and "XLA_PYTHON_CLIENT_MEM_FRACTION" in env


def _text(result: Any) -> str:
    return str(result.text())
