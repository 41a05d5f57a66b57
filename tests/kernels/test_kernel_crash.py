"""A reservation kernel whose process dies (a real SIGKILL from its owner's account, as her
code, a crash or the OOM killer could end it): Jupyter's auto-restarter starts it again, and a shutdown (DELETE) during or
after that restart ends it with nothing left behind; a death it does not restart (its restart
limit) ends the kernel here too.

Real Jupyter server, real kernels of a real UNIX user on a local host, started through the
kernel REST API by the `gpuhive` provisioner (a bare kernel: no image).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from jupyter_gpuhive.kernels.specs import spec_name
from tests.conftest import TOKENS, UTC, book, iso
from tests.kernels.remote_helpers import UNIX, kernels_api, local_host

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def restart_limit() -> int | None:
    """KernelRestarter.restart_limit of the server (None: Jupyter's default, 5)."""
    return None


@pytest.fixture
def hive_config(hive_config: dict[str, Any], python: str) -> dict[str, Any]:
    return {**hive_config, "hosts": [local_host("kc1", 3, python)], "unix_users": UNIX,
            "monitor": False, "site_timezone": "UTC", "min_reservation": "1s",
            "kernel_end_policy": "warn"}  # fmt: skip


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], restart_limit: int | None) -> Any:
    if restart_limit is None:
        return jp_server_config
    return {**jp_server_config, "KernelRestarter": {"restart_limit": restart_limit}}


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


async def start(
    server: Any, api: Any, jp_fetch: Any, gpu: str, length: str = "1h"
) -> tuple[str, str]:
    """A kernel on a new reservation of alice's: its id and its sockets' directory."""
    made = await book(api("alice"), "crash", [gpu], datetime.now(UTC), length)
    body = {"name": spec_name(made.body["id"])}
    reply = await kernels_api(jp_fetch, TOKENS["alice"], "POST", body=body)
    assert reply.status == 201, reply
    kid = str(reply.body["id"])
    sockets = os.path.dirname(server.kernel_manager.get_kernel(kid).get_connection_info()["ip"])
    assert exists(sockets), sockets
    return kid, sockets


def exists(path: str) -> bool:
    return os.path.exists(path)


def kill_as_alice(pid: int) -> None:
    """SIGKILL to her kernel from her own UNIX account (as her code, or a crash, could)."""
    subprocess.run(["kill", "-KILL", str(pid)], user=UNIX["alice"], check=True, env={},
                   timeout=10)  # fmt: skip


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


async def nothing_left(server: Any, api: Any, kid: str, pids: list[int], sockets: str) -> None:
    """No process, no socket directory, no live record, and neither API knows the kernel."""
    record = server.web_app.settings["gpuhive"].kernels.get(kid)
    assert record is not None and not record.live, record
    await until(lambda: not any(alive(pid) for pid in pids), 10, f"{pids} gone")
    assert not exists(sockets), sockets
    assert kid not in server.kernel_manager
    assert (await api("alice")("GET", f"kernels/{kid}")).status == 404  # gpuhive's own route


@SQLITE
async def test_a_kernel_killed_is_restarted_and_a_delete_during_the_restart_ends_it(
    started: Any, api: Any, jp_fetch: Any
) -> None:
    kid, sockets = await start(started, api, jp_fetch, "kc1:0")
    record = started.web_app.settings["gpuhive"].kernels.get(kid)
    km = started.kernel_manager.get_kernel(kid)
    first = record.pid
    kill_as_alice(first)
    # The restarter (every 3 s) launches it again; its start ends after the new kernel
    # answers. The registry shows it running before: a DELETE then is what users send.
    await until(lambda: record.restarts == 1 and record.state == "running", 30, "a restart")
    assert not km.ready.done(), "the DELETE must come while Jupyter's restart is pending"
    second = record.pid
    assert second != first and alive(second)
    deleted = await kernels_api(jp_fetch, TOKENS["alice"], "DELETE", kid)
    assert deleted.status == 204, deleted  # was 500: InvalidStateError
    await nothing_left(started, api, kid, [first, second], sockets)
    assert (record.state, record.reason) == ("ended", "shut down")


@SQLITE
@pytest.mark.parametrize("restart_limit", [0])
async def test_a_kernel_killed_and_not_restarted_ends_with_nothing_left(
    started: Any, api: Any, jp_fetch: Any
) -> None:
    kid, sockets = await start(started, api, jp_fetch, "kc1:1")
    record = started.web_app.settings["gpuhive"].kernels.get(kid)
    pid = record.pid
    kill_as_alice(pid)
    # Past its restart limit the restarter gives it up and Jupyter forgets it (no shutdown):
    # it ends here too, and says why.
    await until(lambda: not record.live, 15, "the kernel declared dead")
    assert (record.state, record.reason) == ("dead", "its process exited (status -9) and it "
                                             "was not restarted"), record  # fmt: skip
    await nothing_left(started, api, kid, [pid], sockets)
    deleted = await kernels_api(jp_fetch, TOKENS["alice"], "DELETE", kid)
    assert deleted.status == 404 and kid in deleted.body["message"], deleted


@SQLITE
async def test_a_kernel_killed_after_its_reservation_ended_is_not_restarted_and_ends(
    started: Any, api: Any, jp_fetch: Any
) -> None:
    kid, sockets = await start(started, api, jp_fetch, "kc1:2")
    registry = started.web_app.settings["gpuhive"].kernels
    record = registry.get(kid)
    # Its reservation ends a second from now (alice ends it early: no start on a loaded box
    # can outlast an hour's booking, and the test need not wait out a whole one).
    soon_end = datetime.now(UTC) + timedelta(seconds=1)
    ended = await api("alice")("PATCH", f"reservations/{record.reservation_id}",
                               {"end": iso(soon_end)})  # fmt: skip
    assert ended.status == 200, ended
    res = await registry.reservation(record.reservation_id)
    await asyncio.sleep((res.end - registry.now()).total_seconds() + 0.2)
    assert record.state == "running"  # the end policy: a warning only
    pid = record.pid
    kill_as_alice(pid)
    # The restart is refused (the reservation has ended): its process and socket folder
    # go with it, though Jupyter keeps the failed kernel until it is shut down.
    await until(lambda: not record.live, 15, "the restart refused")
    assert record.state == "dead" and record.reason.startswith("not restarted: Reservation")
    await until(lambda: not exists(sockets), 5, "its socket folder gone")
    deleted = await kernels_api(jp_fetch, TOKENS["alice"], "DELETE", kid)
    assert deleted.status == 204, deleted
    await nothing_left(started, api, kid, [pid], sockets)
