"""`make demo` (python -m jupyter_gpuhive.cli.demo): it serves, starts with something to see
(alice's and bob's bookings, a violation, a queued job) while its user still books freely, and a
SIGTERM leaves nothing behind."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jupyter_gpuhive.sim.ports import free_port
from tests.support.waiting import wait_for


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def call(port: int, token: str, method: str, path: str, body: object = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/gpuhive/api/{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def check_seeded_state(port: int, token: str) -> None:
    """What the demo starts with, through the REST API."""
    me = getpass.getuser()
    _, found = call(port, token, "GET", "reservations")
    others = {(r["owner"], r["title"]): r for r in found["reservations"]}
    assert {"alice", "bob"} == {owner for owner, _ in others}, others
    assert len(others) >= 4
    running = others[("alice", "llama finetune")]
    assert running["gpus"] == ["gpu3:0", "gpu3:1"]
    assert running["status"] == "active"
    _, jobs = call(port, token, "GET", f"jobs?user={me}")
    queued = [j for j in jobs["jobs"] if j["name"] == "overnight sweep"]
    assert len(queued) == 1
    assert (queued[0]["status"], queued[0]["queued"]) == ("pending", True)
    _, hosts = call(port, token, "GET", "hosts")
    assert "alice holds gpu3:0-1 now" in hosts["note"]
    gpu31 = next(g for h in hosts["hosts"] for g in h["gpus"] if g["id"] == "gpu3:1")
    assert gpu31["reservation"]["owner"] == "alice"

    def violation() -> dict | None:  # the demo user's stray process on alice's GPU
        _, seen = call(port, token, "GET", "violations")
        return next((v for v in seen["violations"] if v["gpu"] == "gpu3:1"), None)

    found_violation = wait_for(violation, 60, "the demo's violation on gpu3:1", interval=1)
    assert (found_violation["holder"], found_violation["offender"]) == ("alice", me)
    assert found_violation["kind"] == "foreign"

    # The demo user books freely: a free GPU now, and the next free slot of a busy one.
    status, mine = call(port, token, "POST", "reservations",
                        {"title": "my run", "gpus": ["gpu1:2", "gpu2:0"], "duration": "2h"})  # fmt: skip
    assert status == 201, mine
    status, clash = call(port, token, "POST", "reservations",
                         {"title": "x", "gpus": ["gpu3:0"], "duration": "1h"})  # fmt: skip
    assert status == 409
    assert "alice" in clash["message"]


def test_demo_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "GPUHIVE_DEMO_DIR": str(tmp_path / "demo"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    token = "demo-test-token"
    demo = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuhive.cli.demo", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:

        def loaded() -> bytes | None:
            assert demo.poll() is None, f"the demo exited ({demo.returncode})"
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/gpuhive/api/hosts",
                headers={"Authorization": f"token {token}"},
            )
            with urllib.request.urlopen(request, timeout=5) as response:
                hosts = response.read()
            return hosts if b'"util":85' in hosts else None  # the demo's load, seen by the monitor

        wait_for(loaded, 90, "the demo's load in GET hosts", interval=0.5, ignore=(OSError,))
        check_seeded_state(port, token)

        def topologies() -> bool:  # each host's nvidia-smi topo -m, read by the monitor
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/gpuhive/api/hosts",
                headers={"Authorization": f"token {token}"},
            )
            with urllib.request.urlopen(request, timeout=5) as response:
                hosts = json.loads(response.read())["hosts"]
            groups = {h["name"]: (h.get("topology") or {}).get("nvlink_groups") for h in hosts}
            return groups == {"gpu1": [[0, 1, 2, 3]], "gpu2": [[0, 1], [2, 3]], "gpu3": []}

        wait_for(topologies, 30, "the demo hosts' topology in GET hosts", interval=0.5)
        started = children(demo.pid)
        assert len(started) == 4  # JupyterLab, the two loads and the stray process
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 0
        assert [pid for pid in started if alive(pid)] == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)  # whatever failed, nothing outlives the test
        demo.wait()


def test_seeding_again_adds_nothing_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpuhive.cli.demo import demo_hosts, seed_store, write_config

    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))  # no hosts file there
    config = write_config(tmp_path, demo_hosts(tmp_path))
    first = seed_store(config)
    assert len(first["reservations"]) == 5
    assert first["job"] is not None
    assert seed_store(config) == {"reservations": [], "job": None}
