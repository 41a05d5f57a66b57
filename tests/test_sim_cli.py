"""`jupyter gpuhive sim up|down`: a simulated workstation anyone can try gpuhive on, through the
real CLI, seen by a real server (issue #28, item 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import Client, JupyterServer
from tests.support.waiting import wait_for

USERS = {"tok-me": {"name": "me"}}
CLI = [sys.executable, "-m", "jupyter_gpuhive.cli.main", "sim"]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JupyterServer]:
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # no nvidia-smi: a laptop
    started = JupyterServer({"poll_interval": 0.5}, USERS)
    yield started
    started.stop()


def sim(config: Path, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_DATA_DIR": str(data)}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, check=False)


def hosts_of(client: Client) -> dict[str, Any]:
    status, body, _ = client.call("GET", "hosts")
    assert status == 200, body
    return {h["name"]: h for h in body["hosts"]}


def test_sim_up_gives_a_running_server_simulated_gpus_and_sim_down_takes_them(
    server: JupyterServer, tmp_path: Path
) -> None:
    me = Client(server.port, "tok-me")
    assert hosts_of(me) == {}
    up = sim(server.dir, tmp_path, "up", "--gpus", "2", "--hosts", "3", "--mig")
    assert up.returncode == 0, up.stderr
    assert "Added sim1, sim2, sim3" in up.stdout and "no restart needed" in up.stdout

    def swept() -> Any:
        found = hosts_of(me)
        ready = set(found) == {"sim1", "sim2", "sim3"} and all(
            h["state"] == "up" and len(h["gpus"]) == 2 for h in found.values()
        )
        return found if ready else None

    found = wait_for(swept, 40, what="three simulated hosts swept")
    assert found["sim2"]["gpus"][0]["mem_total_mib"] == 81920
    slices = found["sim2"]["gpus"][0]["slices"]
    assert [s["id"] for s in slices] == ["sim2:0/mig1", "sim2:0/mig5", "sim2:0/mig13"]
    status, made, _ = me.call("POST", "reservations",
                              {"title": "try", "gpus": ["sim3:1"], "duration": "30m"})  # fmt: skip
    assert status == 201, made

    again = sim(server.dir, tmp_path, "up", "--gpus", "4")  # replaces, does not pile up
    assert again.returncode == 0, again.stderr
    assert "replacing the earlier ones" in again.stdout
    wait_for(lambda: set(hosts_of(me)) == {"sim1"} and len(hosts_of(me)["sim1"]["gpus"]) == 4,
             40, what="one host of 4 GPUs")  # fmt: skip

    down = sim(server.dir, tmp_path, "down")
    assert down.returncode == 0, down.stderr
    assert "Removed sim1 from" in down.stdout
    assert not (tmp_path / "gpuhive-sim").exists()
    assert "sim1" not in (server.dir / "gpuhive_hosts.toml").read_text()
    assert "nothing to remove" in sim(server.dir, tmp_path, "down").stdout


@pytest.mark.parametrize(
    "args", [("up", "--gpus", "0"), ("up", "--hosts", "99"), ("up", "extra"), ("sideways",), ()]
)
def test_sim_with_bad_arguments_says_how_to_call_it(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = sim(tmp_path / "cfg", tmp_path, *args)
    assert done.returncode != 0
    assert "jupyter gpuhive sim up" in done.stdout + done.stderr
    assert not (tmp_path / "cfg" / "gpuhive_hosts.toml").exists()


def test_sim_up_amd_gives_rocm_hosts(server: JupyterServer, tmp_path: Path) -> None:
    me = Client(server.port, "tok-me")
    up = sim(server.dir, tmp_path, "up", "--gpus", "2", "--amd")
    assert up.returncode == 0, up.stderr
    assert "2 simulated MI300X GPUs each" in up.stdout
    assert 'vendor = "amd"' in (server.dir / "gpuhive_hosts.toml").read_text()

    def swept() -> Any:
        host = hosts_of(me).get("sim1")
        return host if host and host["state"] == "up" and len(host["gpus"]) == 2 else None

    host = wait_for(swept, 40, what="the simulated AMD host swept")
    assert host["vendor"] == "amd"
    assert host["pinning"]["variable"] == "ROCR_VISIBLE_DEVICES"
    assert host["gpus"][1]["mem_total_mib"] == 196592
    assert host["gpus"][1]["uuid"].startswith("GPU-") and len(host["gpus"][1]["uuid"]) == 20
    both = sim(tmp_path / "cfg", tmp_path, "up", "--mig", "--amd")
    assert both.returncode != 0 and "[--mig | --amd]" in both.stderr
