"""With no hosts every view says what to do; with a host down, the dashboard says why and how
to fix it (a real server whose hosts file gets a host while it runs)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from jupyter_gpuhive import widgets
from jupyter_gpuhive.hosts.file import add_host
from jupyter_gpuhive.notebook.client import HiveClient
from jupyter_gpuhive.sim.ports import free_port
from tests.conftest import TOKENS, USERS
from tests.support.server import JupyterServer
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    root = tmp_path_factory.mktemp("empty")
    config = {
        "db_url": f"sqlite:///{root / 'hive.sqlite'}",
        "hosts_file": str(root / "hosts.toml"),
        "auto_local_host": False,  # whatever this machine has, no hosts
        "poll_interval": 0.5,
        "ssh_connect_timeout": 2.0,
    }
    server = JupyterServer(config, USERS)
    server.hosts_file = root / "hosts.toml"  # type: ignore[attr-defined]
    yield server
    server.stop()


def text_of(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_every_view_shows_the_first_steps_without_hosts(empty_server: JupyterServer) -> None:
    client = HiveClient(f"http://127.0.0.1:{empty_server.port}/", TOKENS["alice"])
    views = {
        "calendar": widgets.calendar(client),
        "overview": widgets.overview(client),
        "dashboard": widgets.dashboard(client, live=False),
        "jobs": widgets.jobs(client, live=False),
        "job_builder": widgets.job_builder(client),
    }
    for name, view in views.items():
        shown = getattr(view, "notice", None) or view.status  # jobs views: in their status
        text = text_of(shown.value)
        assert "No GPU hosts are configured yet." in text, name
        assert "jupyter gpuhive hosts add gpu1 gpu1.example.org --user $USER" in text, name
        assert "jupyter gpuhive init" in text, name
        assert view.widget.children[0] is shown or name.startswith("job"), name  # on top


def test_a_host_that_goes_down_shows_its_reason_and_fix(empty_server: JupyterServer) -> None:
    port = free_port()  # nothing listens there
    add_host(empty_server.hosts_file, {"name": "gone", "address": "127.0.0.1", "port": port})  # type: ignore[attr-defined]
    client = HiveClient(f"http://127.0.0.1:{empty_server.port}/", TOKENS["alice"])
    dash = widgets.dashboard(client, live=False)

    def told() -> bool:
        dash.refresh()
        return "gone is down" in dash.notice.value

    wait_for(told, 40, "the dashboard to say gone is down", interval=0.5)
    text = text_of(dash.notice.value)
    assert f"gone is down: connection refused by 127.0.0.1:{port}" in text
    assert "jupyter gpuhive test" in text
    assert "No GPU hosts are configured yet." not in text
