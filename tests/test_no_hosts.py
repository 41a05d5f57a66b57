"""The laptop case: no GPU hosts at all. Asking for GPUs (POST reservations/search, the magics)
is a 409 that says how to add a host, not "Only 0 GPUs are free" (issue #28, item 6)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from IPython.core.error import UsageError

from jupyter_gpuhive.bookings.finder import SlotSearch
from jupyter_gpuhive.bookings.reservations import Policy
from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity
from jupyter_gpuhive.model.finder import Want
from jupyter_gpuhive.store import Store
from tests.api.helpers import refused
from tests.support.server import JupyterServer, magics_shell

NEXT_STEP = ("No GPU hosts are configured", "jupyter gpuhive hosts add", "jupyter gpuhive sim up")


@pytest.fixture
def hive_config(hive_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """No hosts, no hosts file, and not this machine either."""
    return {**hive_config, "hosts": [], "auto_local_host": False,
            "hosts_file": str(tmp_path / "no-hosts.toml")}  # fmt: skip


async def test_search_with_no_hosts_says_how_to_add_one(api: Any) -> None:
    alice = api("alice")
    for body in (
        {"count": 1, "duration": "1h"},
        {"count": 2, "duration": "2h", "same_host": True, "limit": 6},
        {"count": 1, "duration": "4h", "profile": "1g.10gb"},
    ):
        refused(await alice("POST", "reservations/search", body), 409, *NEXT_STEP)
    # malformed bodies are still 400 (the schema answers before the finder)
    refused(await alice("POST", "reservations/search", {"count": "one"}), 400, "count")
    hosts = await alice("GET", "hosts")
    assert hosts.status == 200 and hosts.body["hosts"] == [] and hosts.body["setup"]


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """A real server in its own process with no GPU hosts (as on a laptop)."""
    root = tmp_path_factory.mktemp("no-hosts")
    config = {"db_url": f"sqlite:///{root / 'hive.sqlite'}", "hosts": [],
              "auto_local_host": False, "site_timezone": "UTC"}  # fmt: skip
    server = JupyterServer(config, {"tok-me": {"name": "me"}})
    yield server
    server.stop()


@pytest.fixture
def shell(empty_server: JupyterServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    return magics_shell(empty_server.port, "tok-me", monkeypatch, tmp_path)


@pytest.mark.parametrize(
    "line", ["1 --for 1h", "2 --for 2h --earliest", "1 --for 1h --wait --timeout 5s"]
)
def test_gpureserve_with_no_hosts_says_how_to_add_one(shell: Any, line: str) -> None:
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("gpureserve", line)
    message = str(raised.value)
    for words in NEXT_STEP:
        assert words in message, message
    assert "Only 0 GPUs" not in message
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # nothing was pinned


def test_hosts_without_gpus_yet_say_so(sqlite_url: str) -> None:
    """Hosts configured but none has reported a GPU yet: the 409 names them, not the setup."""
    store = Store(sqlite_url).open()
    try:
        search = SlotSearch(store, Policy(ZoneInfo("UTC")), lambda: None)
        with pytest.raises(Conflict, match="No GPU hosts are configured"):
            search.search(Identity("me"), Want(1, 3600, 0, 0))
        store.inventory.sync([HostDecl("far", transport="ssh", address="far.example.org")])
        with pytest.raises(Conflict, match=r"None of the GPU hosts \(far\) has reported GPUs"):
            search.search(Identity("me"), Want(1, 3600, 0, 0))
    finally:
        store.close()


def test_gpus_that_all_failed_or_are_drained_are_named(sqlite_url: str) -> None:
    """GPUs reported but none bookable: the 409 says which failed or were drained, and why,
    not that no host has reported GPUs (issue #48)."""
    store = Store(sqlite_url).open()
    try:
        gpus = tuple(GpuDecl(i, f"GPU-near-{i}", "Simulated A100") for i in range(2))
        store.inventory.sync([HostDecl("near", transport="local", gpus=gpus)])
        first, second = store.inventory.gpus()
        store.health.record({first.id: ("failed", ("uncorrectable ECC errors",))})
        store.health.drain(second.id, True, "boss", "fan swap")
        search = SlotSearch(store, Policy(ZoneInfo("UTC")), lambda: None)
        with pytest.raises(Conflict) as refused:
            search.search(Identity("me"), Want(1, 3600, 0, 0))
        message = str(refused.value)
        assert "has reported GPUs" not in message, message
        assert "all 2 are failed or drained" in message, message
        assert "near:0 failed its health check (uncorrectable ECC errors)" in message, message
        assert "near:1 was drained for maintenance by boss: fan swap" in message, message
        store.health.drain(second.id, False, "boss", None)  # one back: it is offered again
        _, slots = search.search(Identity("me"), Want(1, 3600, 0, 0))
        assert slots and all(u.ref == "near:1" for s in slots for u in s.units), slots
    finally:
        store.close()
