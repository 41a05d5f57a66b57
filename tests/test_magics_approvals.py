"""%gpureserve and a booking that waits for approval (#46): it says so, and leaves the kernel's
GPUs alone. A real server in its own process (local simulated host), a real IPython shell."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from tests.support.server import JupyterServer, magics_shell

USERS = {"tok-alice": {"name": "alice"}, "tok-boss": {"name": "boss", "groups": ["admins"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    root = tmp_path_factory.mktemp("magics-approvals")
    config = {
        "db_url": f"sqlite:///{root / 'hive.sqlite'}",
        "hosts": [{"name": "gpu1", "address": "127.0.0.1", "transport": "local",
                   "gpu_count": 4}],
        "monitor": False, "admin_groups": ["admins"], "site_timezone": "UTC",
        "approvals": {"gpu1": {"gpus": 1}},  # more than one GPU waits for a site admin
    }  # fmt: skip
    srv = JupyterServer(config, USERS)
    yield srv
    srv.stop()


def test_gpureserve_says_a_booking_waits_and_pins_nothing(
    server: JupyterServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shell = magics_shell(server.port, "tok-alice", monkeypatch, tmp_path)
    with capture_output():
        done = shell.run_line_magic("gpureserve", "gpu1:0,1 --for 1h --title big")
    assert done["tentative"] is True
    text = shell.display_formatter.format(done)[0]["text/plain"]
    assert text.startswith("Reserved gpu1:0, gpu1:1 from ")
    assert "It waits for an administrator's approval" in text
    assert "tentative: waits for an administrator's approval" in text  # its status line
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # nothing may run on it yet
    with capture_output():
        single = shell.run_line_magic("gpureserve", "gpu1:2 --for 1h --title small --no-pin")
    assert single["tentative"] is False
    assert "approval" not in shell.display_formatter.format(single)[0]["text/plain"]
    for rid in (done["id"], single["id"]):
        shell.run_line_magic("gpureserve", f"--cancel {rid}")
