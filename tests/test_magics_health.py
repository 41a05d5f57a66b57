"""Health in the magics against a real server sweeping a simulated host (#48): a failed or
drained GPU is never "free" in %gpustatus nor in GET hosts' per-GPU `state`, and booking by
count (with and without --wait) skips it and takes a healthy free GPU."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import set_gpu_fault
from tests.conftest import TOKENS, USERS
from tests.support.server import Client, JupyterServer, magics_shell
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the simulated host")
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture
def sim(tmp_path: Path) -> LocalSimHost:
    return LocalSimHost("sim1", tmp_path / "sim")


@pytest.fixture
def server(tmp_path: Path, sim: LocalSimHost) -> Iterator[JupyterServer]:
    env = sim.env()
    config = {
        "db_url": f"sqlite:///{tmp_path / 'hive.sqlite'}",
        "hosts": [{"name": "sim1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "min_reservation": "1m",
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
    }
    srv = JupyterServer(config, USERS)
    yield srv
    srv.stop()


def states(client: Client) -> dict[str, str]:
    """GET hosts' per-GPU `state` by GPU ref."""
    status, body, _ = client.call("GET", "hosts")
    assert status == 200, body
    return {g["id"]: g["state"] for h in body["hosts"] for g in h["gpus"]}


def test_failed_and_drained_gpus_are_never_free_nor_chosen(server, sim, monkeypatch, tmp_path):
    alice, boss = Client(server.port, TOKENS["alice"]), Client(server.port, TOKENS["boss"])
    wait_for(lambda: len(states(alice)) == 4, 30, "discovery of sim1's 4 GPUs", interval=0.3)
    set_gpu_fault(sim.config_path, 0, "ecc")
    status, body, _ = boss.call("POST", "health/drain", {"gpu": "sim1:1", "reason": "fan"})
    assert status == 200, body
    wait_for(lambda: states(alice)["sim1:0"] == "failed", 60, "sim1:0 judged failed")
    assert states(alice) == {"sim1:0": "failed", "sim1:1": "drained", "sim1:2": "free",
                             "sim1:3": "free"}  # fmt: skip

    shell = magics_shell(server.port, TOKENS["alice"], monkeypatch, tmp_path)
    shown = shell.display_formatter.format(shell.run_line_magic("gpustatus", ""))[0]
    rows = {line.split()[0]: line for line in shown["text/plain"].splitlines()[2:] if line}
    assert "free" not in rows["sim1:0"] and "failed: " in rows["sim1:0"], rows
    assert "ECC" in rows["sim1:0"], rows
    assert "free" not in rows["sim1:1"] and "drained by boss" in rows["sim1:1"], rows
    assert "data-state='failed'" in shown["text/html"]
    assert "data-state='drained'" in shown["text/html"]

    with capture_output():
        booked = shell.run_line_magic("gpureserve", "1 --host sim1 --for 30m --no-pin")
    assert booked["gpus"] == ["sim1:2"]
    with capture_output():  # --wait: the next healthy free one, not a wait on sim1:0
        waited = shell.run_line_magic(
            "gpureserve", "1 --host sim1 --for 30m --no-pin --wait --timeout 20s"
        )
    assert waited["gpus"] == ["sim1:3"]
    assert states(alice) == {"sim1:0": "failed", "sim1:1": "drained", "sim1:2": "reserved",
                             "sim1:3": "reserved"}  # fmt: skip
