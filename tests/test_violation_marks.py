"""An ongoing violation is marked on its process: in GET hosts (what the sidebar's GPU row shows)
and in %gpustatus, for the offender and the holder; others see no more than before (issue #28,
item 5). A real server, a simulated host and a real process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.users import current_user
from tests.support.server import Client, JupyterServer, magics_shell
from tests.support.waiting import wait_for

ME = current_user()  # the offender: the stray process is this test's own
USERS = {"tok-me": {"name": ME}, "tok-bob": {"name": "bob"}, "tok-carol": {"name": "carol"}}
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture
def setting(tmp_path: Path) -> Iterator[tuple[JupyterServer, subprocess.Popen[bytes]]]:
    host = LocalSimHost("vio", tmp_path / "sim")
    env = host.env({})
    config = {
        "db_url": f"sqlite:///{tmp_path / 'hive.sqlite'}",
        "hosts": [{"name": "vio", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.5,
        "violation_ladder": [{"after": 0, "handler": "event"}],  # no terminal messages
    }
    server = JupyterServer(config, USERS)
    stray = None
    try:
        bob = Client(server.port, "tok-bob")
        wait_for(lambda: bob.call("GET", "hosts")[1]["hosts"][0]["gpus"], 30, what="vio's GPUs")
        status, made, _ = bob.call("POST", "reservations", {"title": "bob's run", "gpus": ["vio:1"],
                                                            "duration": "1h"})  # fmt: skip
        assert status == 201, made
        stray = host.start_process([1], command=("sleep", "600"))
        yield server, stray
    finally:
        if stray is not None:
            stray.kill()
            stray.wait()
        server.stop()


def process_on(client: Client, gpu: str, pid: int) -> dict[str, Any] | None:
    _, body, _ = client.call("GET", "hosts")
    for g in body["hosts"][0]["gpus"]:
        for p in g["processes"] if g["id"] == gpu else ():
            if p["pid"] == pid:
                return p  # type: ignore[no-any-return]
    return None


def test_the_violating_process_is_marked_in_hosts_and_in_gpustatus(
    setting: tuple[JupyterServer, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, stray = setting
    me, carol = Client(server.port, "tok-me"), Client(server.port, "tok-carol")

    def marked() -> Any:
        found = process_on(me, "vio:1", stray.pid)
        return found if found and found["violation"] else None

    mine = wait_for(marked, 40, what="the stray process marked as a violation")
    assert mine["violation"]["kind"] == "foreign"
    assert mine["violation"]["holder"] == "bob"
    assert isinstance(mine["violation"]["id"], int)
    holder_view = process_on(Client(server.port, "tok-bob"), "vio:1", stray.pid)
    assert holder_view is not None and holder_view["violation"]["id"] == mine["violation"]["id"]
    bystander = process_on(carol, "vio:1", stray.pid)  # public_violations is off
    assert bystander is not None and bystander["violation"] is None

    shell = magics_shell(server.port, "tok-me", monkeypatch)
    data, _ = shell.display_formatter.format(shell.run_line_magic("gpustatus", ""))
    text, html = data["text/plain"], data["text/html"]
    row = next(line for line in text.splitlines() if line.startswith("vio:1 "))
    assert f"⚠ {ME} (violation)" in row
    note = f"⚠ Violation on vio:1: Your process {stray.pid} (sleep) runs on bob's reservation."
    assert note in text
    assert note.replace("'", "&#x27;") in html


def test_the_violation_message_speaks_of_one_process_or_several() -> None:
    from datetime import datetime

    from jupyter_gpuhive.model.violations import FOREIGN, Violation
    from jupyter_gpuhive.protection.handlers.base import Incident, describe

    def said(pids: tuple[int, ...]) -> str:
        seen = Violation(FOREIGN, "gpu3", "gpu3:1", "GPU-1", "me", "bob", 4, 1, pids,
                         ("python",), None, datetime(2026, 1, 1))  # fmt: skip
        return describe(Incident.of(1, seen, "bob", "run"))

    assert said((41,)).startswith("Your process 41 on GPU gpu3:1 runs on a GPU reserved by bob")
    assert said((41,)).endswith("Please stop it: gpuhive may stop it for you.")
    assert said((41, 42)).startswith("Your processes 41, 42 on GPU gpu3:1 run on a GPU reserved")
    assert "(es)" not in said((41, 42))
