"""%gpureserve pins this kernel by the host's vendor (#43): on an AMD host (the stand-in's
mi300x, swept by a real server) ROCR_VISIBLE_DEVICES gets the booked GPUs' UUIDs and
HIP_VISIBLE_DEVICES their positions, as the server's GET hosts describes the pinning."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset
from tests.conftest import TOKENS, USERS
from tests.support.server import Client, JupyterServer, magics_shell
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the simulated host")
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
PINNED = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JupyterServer]:
    sim = LocalSimHost("am1", tmp_path / "sim", preset("mi300x", "am1"))
    env = sim.env()
    config = {
        "db_url": f"sqlite:///{tmp_path / 'hive.sqlite'}",
        "hosts": [{"name": "am1", "transport": "local", "vendor": "amd",
                   "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "min_reservation": "1m",
        "site_timezone": "UTC",
    }  # fmt: skip
    srv = JupyterServer(config, USERS)
    yield srv
    srv.stop()


def test_gpureserve_pins_an_amd_host_with_rocms_variables(server, monkeypatch, tmp_path) -> None:
    alice = Client(server.port, TOKENS["alice"])

    def hosts() -> list[dict]:
        status, body, _ = alice.call("GET", "hosts")
        return body["hosts"] if status == 200 and body["hosts"][0]["gpus"] else []

    (host,) = wait_for(hosts, 30, "discovery of am1's GPUs", interval=0.3)
    assert host["vendor"] == "amd"
    assert host["pinning"]["variable"] == "ROCR_VISIBLE_DEVICES"
    assert host["pinning"]["counted"] == ["HIP_VISIBLE_DEVICES"]
    for name in PINNED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUHIVE_LOCAL_HOST", "am1")  # this kernel runs on am1
    shell = magics_shell(server.port, TOKENS["alice"], monkeypatch, tmp_path)
    done = shell.run_line_magic("gpureserve", "am1:2,5 --for 10m --title rocm")
    assert done["gpus"] == ["am1:2", "am1:5"]
    assert os.environ["ROCR_VISIBLE_DEVICES"] == ",".join(done["gpu_uuids"])
    assert os.environ["HIP_VISIBLE_DEVICES"] == "0,1"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # not an NVIDIA host
    shown = shell.display_formatter.format(done)[0]["text/plain"]
    assert f"ROCR_VISIBLE_DEVICES={','.join(done['gpu_uuids'])} in this kernel." in shown
