"""The first hour: a server with no gpuhive config uses this machine when nvidia-smi runs here;
with no hosts it says what to do; `jupyter gpuhive hosts add|remove` reach a running server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts.config import local_gpu_host, local_host_name
from jupyter_gpuhive.hosts.file import add_host
from jupyter_gpuhive.sim.cluster import LocalSimHost
from tests.support.server import Client, JupyterServer
from tests.support.waiting import wait_for

USERS = {"tok-me": {"name": "me"}}


def stand_in_on_path(root: Path, name: str) -> Path:
    """A folder with an `nvidia-smi` that answers for a simulated 4-GPU machine called `name`
    without any environment of its own, as a real driver's nvidia-smi does."""
    sim = LocalSimHost(name, root / "sim")
    folder = root / "driver-bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    env = sim.env({})
    script.write_text(
        "#!/bin/sh\n"
        f"GPUHIVE_SIM_CONFIG='{env['GPUHIVE_SIM_CONFIG']}' GPUHIVE_SIM_HOST='{name}' "
        f"exec '{sim.bin_dir / 'nvidia-smi'}' \"$@\"\n"
    )
    script.chmod(0o755)
    return folder


def hosts_of(client: Client) -> dict[str, Any]:
    status, body, _ = client.call("GET", "hosts")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


@pytest.fixture
def server_with_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., JupyterServer]]:
    started: list[JupyterServer] = []

    def start(path: str, hive_config: dict[str, Any]) -> JupyterServer:
        monkeypatch.setenv("PATH", path)
        server = JupyterServer(hive_config, USERS, {"log_level": "INFO"})
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_local_gpu_host_reads_nvidia_smi_and_carries_its_path(tmp_path: Path) -> None:
    folder = stand_in_on_path(tmp_path, "ws")
    spec, why = local_gpu_host(f"{folder}:/usr/bin:/bin")
    assert spec is not None, why
    assert spec["name"] == local_host_name()
    assert spec["transport"] == "local"
    assert spec["env"]["PATH"].split(":")[0] == str(folder)
    assert [g["index"] for g in spec["gpus"]] == [0, 1, 2, 3]
    assert all(g["uuid"].startswith("GPU-") for g in spec["gpus"])
    assert "4 GPUs" in why
    assert local_gpu_host("/nonexistent") == (None, "no nvidia-smi on PATH")


def test_fresh_server_uses_this_machine_when_nvidia_smi_runs(
    tmp_path: Path, server_with_path: Callable[..., JupyterServer]
) -> None:
    folder = stand_in_on_path(tmp_path, "ws")
    server = server_with_path(f"{folder}:{os.environ['PATH']}", {})  # no gpuhive config at all
    me = Client(server.port, "tok-me")
    name = local_host_name()

    def discovered() -> Any:
        hosts = hosts_of(me)["hosts"]
        return hosts if hosts and hosts[0]["state"] == "up" and hosts[0]["gpus"] else None

    hosts = wait_for(discovered, 40, what="the local host to be swept")
    assert [h["name"] for h in hosts] == [name]
    assert hosts[0]["transport"] == "local"
    assert [g["id"] for g in hosts[0]["gpus"]] == [f"{name}:{i}" for i in range(4)]
    assert hosts[0]["gpus"][0]["mem_total_mib"] == 40960  # measured by the stand-in
    assert hosts[0]["advice"] is None
    start = datetime.now(timezone.utc) + timedelta(minutes=1)
    status, made, _ = me.call(
        "POST", "reservations",
        {"title": "first", "gpus": [f"{name}:1"], "start": start.isoformat(), "duration": "1h"},
    )  # fmt: skip
    assert status == 201, made
    assert made["gpus"] == [f"{name}:1"]
    log = (server.dir / "server.log").read_text()
    assert f"using this machine as host '{name}'" in log
    assert "c.GpuHiveApp.auto_local_host = False" in log


def test_no_hosts_no_nvidia_smi_guides_and_hosts_add_reaches_the_running_server(
    tmp_path: Path, server_with_path: Callable[..., JupyterServer]
) -> None:
    server = server_with_path("/usr/local/bin:/usr/bin:/bin", {"poll_interval": 0.5})
    me = Client(server.port, "tok-me")
    empty = hosts_of(me)
    assert empty["hosts"] == []
    commands = [s["command"] for s in empty["setup"]["steps"]]
    assert any(c and c.startswith("jupyter gpuhive hosts add ") for c in commands)
    assert "jupyter gpuhive init" in commands
    assert "no nvidia-smi on PATH" in (server.dir / "server.log").read_text()

    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(server.dir), "JUPYTER_DATA_DIR": str(server.dir)}
    cli = [sys.executable, "-m", "jupyter_gpuhive.cli.main", "hosts"]
    added = subprocess.run(
        [*cli, "add", "box", "box.lab", "--user", "hive", "--port", "2222"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "no restart needed" in added.stdout
    hosts_file = server.dir / "gpuhive_hosts.toml"
    assert 'address = "box.lab"' in hosts_file.read_text()

    # A simulated host written to the same file (the way `hosts add` writes) with the env
    # its stand-in needs: the running server sweeps it and its GPUs can be booked.
    sim = LocalSimHost("sim1", tmp_path / "sim1")
    env_sim = sim.env({})
    add_host(hosts_file, {"name": "sim1", "transport": "local", "env": {
        k: env_sim[k] for k in ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")}})  # fmt: skip

    def both() -> Any:
        found = {h["name"]: h for h in hosts_of(me)["hosts"]}
        ready = {"box", "sim1"} <= set(found) and found["sim1"]["gpus"]
        return found if ready and found["box"]["state"] == "down" else None

    found = wait_for(both, 40, what="box (down) and sim1 in GET hosts")
    assert found["box"]["port"] == 2222
    advice = found["box"]["advice"]  # box.lab does not resolve: the reason and the fix
    assert advice["message"].startswith("box is down: ")
    assert "jupyter gpuhive test" in [s["command"] for s in advice["steps"]]
    assert found["sim1"]["advice"] is None
    assert [g["id"] for g in found["sim1"]["gpus"]] == [f"sim1:{i}" for i in range(4)]
    status, made, _ = me.call("POST", "reservations", {"title": "t", "gpus": ["sim1:0"],
                                                       "duration": "30m"})  # fmt: skip
    assert status == 201, made
    assert "setup" in hosts_of(me) and hosts_of(me)["setup"] is None

    for name in ("box", "sim1"):
        removed = subprocess.run([*cli, "remove", name], env=env, capture_output=True,
                                 text=True, check=False)  # fmt: skip
        assert removed.returncode == 0, removed.stderr
    wait_for(lambda: hosts_of(me)["hosts"] == [], 40, what="the hosts to go")
    assert hosts_of(me)["setup"] is not None
    again = subprocess.run([*cli, "remove", "box"], env=env, capture_output=True, text=True,
                           check=False)  # fmt: skip
    assert again.returncode == 1
    assert "has no host named 'box'" in again.stderr


def test_a_broken_hosts_file_changes_nothing_and_says_why(
    tmp_path: Path, server_with_path: Callable[..., JupyterServer]
) -> None:
    sim = LocalSimHost("sim2", tmp_path / "sim2")
    env_sim = sim.env({})
    hosts_file = tmp_path / "hosts.json"
    add_host(hosts_file, {"name": "sim2", "transport": "local", "env": {
        k: env_sim[k] for k in ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")}})  # fmt: skip
    server = server_with_path(
        os.environ["PATH"], {"poll_interval": 0.5, "hosts_file": str(hosts_file)}
    )
    me = Client(server.port, "tok-me")
    wait_for(lambda: [h["name"] for h in hosts_of(me)["hosts"]] == ["sim2"], 40, what="sim2")
    hosts_file.write_text('[{"name": "sim2", "transport": "carrier pigeon"}]')
    log = server.dir / "server.log"
    wait_for(lambda: "changed but is not used" in log.read_text(), 40, what="the error in the log")
    assert "transport must be one of" in log.read_text()
    assert [h["name"] for h in hosts_of(me)["hosts"]] == ["sim2"]


def test_the_first_hosts_add_on_a_gpu_workstation_keeps_it_and_a_removed_host_is_marked_gone(
    tmp_path: Path, server_with_path: Callable[..., JupyterServer]
) -> None:
    """Issue #28 item 3: `hosts add` of the first remote host keeps the workstation's own GPUs
    (and so its reservations); a host that does go leaves its reservations marked."""
    folder = stand_in_on_path(tmp_path, "ws")
    server = server_with_path(f"{folder}:{os.environ['PATH']}", {"poll_interval": 0.5})
    me = Client(server.port, "tok-me")
    name = local_host_name()
    wait_for(lambda: [h["name"] for h in hosts_of(me)["hosts"]] == [name], 40, what="this machine")
    status, made, _ = me.call("POST", "reservations", {"title": "mine", "gpus": [f"{name}:0"],
                                                       "duration": "1h"})  # fmt: skip
    assert status == 201, made
    assert made["hosts_gone"] == []

    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(server.dir), "JUPYTER_DATA_DIR": str(server.dir)}
    cli = [sys.executable, "-m", "jupyter_gpuhive.cli.main", "hosts"]
    first = subprocess.run([*cli, "add", "box", "box.lab"], env=env, capture_output=True,
                           text=True, check=True)  # fmt: skip
    assert f"Kept this machine ({name}) as a host" in first.stdout
    assert f"jupyter gpuhive hosts remove {name}" in first.stdout
    hosts_file = (server.dir / "gpuhive_hosts.toml").read_text()
    assert hosts_file.index(f'name = "{name}"') < hosts_file.index('name = "box"')
    second = subprocess.run([*cli, "add", "box2", "box2.lab"], env=env, capture_output=True,
                            text=True, check=True)  # fmt: skip
    assert "Kept this machine" not in second.stdout  # only when the file gets its first host

    def both() -> Any:
        found = {h["name"]: h for h in hosts_of(me)["hosts"]}
        return found if {name, "box", "box2"} <= set(found) else None

    found = wait_for(both, 40, what="this machine, box and box2 in GET hosts")
    assert found[name]["state"] == "up" and len(found[name]["gpus"]) == 4
    status, body, _ = me.call("GET", f"reservations/{made['id']}")
    assert status == 200 and body["hosts_gone"] == [], body

    removed = subprocess.run([*cli, "remove", name], env=env, capture_output=True, text=True,
                             check=True)  # fmt: skip
    assert "its reservations and history stay" in removed.stdout

    def marked() -> Any:
        _, listed, _ = me.call("GET", "reservations")
        mine = [r for r in listed["reservations"] if r["id"] == made["id"]]
        return mine[0] if mine and mine[0]["hosts_gone"] == [name] else None

    wait_for(marked, 40, what="the reservation marked host gone")
