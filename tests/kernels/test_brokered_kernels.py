"""Team mode's kernels at the broker level: who may do what, and the end policy's shutdown.

The service side is a real Jupyter server with gpuhive whose brokered-kernel routes get a
real KernelBroker (as server/hub.py gives the team's service), its real lifecycle and a real
reservation on a `local` host, booked for ten minutes (no start on a loaded box outlasts it)
and ended early (PATCH end, as its owner may) a few seconds ahead once the kernel was used.
The user's side is what a client-mode server runs: jupyter_server's own kernel manager with
the `gpuhive` provisioner (which becomes TeamProvisioner) and a real ServiceLink over HTTP
with the user's token, its auto-restarter on. The Hub end to end is tests/hub/test_team_kernels.py (~60 s a test).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_server.services.kernels.kernelmanager import ServerKernelManager
from traitlets.config import Config, LoggingConfigurable

from jupyter_gpuhive.kernels.broker import KernelBroker
from jupyter_gpuhive.kernels.team import TeamProvisioner
from jupyter_gpuhive.server.kernel_manager import restarter_config
from jupyter_gpuhive.server.service_link import ServiceLink
from tests.conftest import TOKENS, UTC, book, iso
from tests.kernels.remote_helpers import UNIX, local_host, write_spec

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
LENGTH = 25  # seconds: the longest wait for the end policy once the end is near
AHEAD_S = 2  # the early end, from when the kernel has been used


@pytest.fixture
def hive_config(hive_config: dict[str, Any], python: str) -> dict[str, Any]:
    host = local_host("kbr", 2, python)
    return {**hive_config, "hosts": [host], "unix_users": UNIX, "kernel_specs": False,
            "min_reservation": "1s", "monitor": False, "kernel_end_policy": "shutdown",
            "site_timezone": "UTC"}  # fmt: skip


@pytest.fixture
def sockets() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="ghb-")  # short: Unix socket paths are limited to 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def service(jp_serverapp: Any, jp_asyncio_loop: Any, sockets: str) -> Iterator[KernelBroker]:
    """The server as the team's service: started, with a broker behind its kernel routes."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    broker = KernelBroker(jp_serverapp.web_app.settings["gpuhive"].kernels, sockets, lease=60)
    jp_serverapp.web_app.settings["gpuhive_broker"] = broker
    yield broker
    jp_asyncio_loop.run_until_complete(broker.close())


class UsersServer(LoggingConfigurable):
    """A client-mode server's kernel manager, as far as a kernel's own manager sees it."""


def alive(pid: int) -> bool:
    done = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return bool(done.stdout.strip()) and not done.stdout.strip().startswith("Z")


async def until(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.2)
    return bool(check())


@SQLITE
async def test_an_admin_signals_but_never_launches_and_the_end_policy_ends_it_for_good(
    service: KernelBroker, api: Any, jp_http_port: int, jp_base_url: str, tmp_path: Path
) -> None:
    made = await book(api("alice"), "brokered", ["kbr:1"], datetime.now(UTC), "10m")
    rid = made.body["id"]
    link = ServiceLink(f"http://127.0.0.1:{jp_http_port}{jp_base_url}gpuhive", TOKENS["alice"])
    name = write_spec(tmp_path, f"brokered-{rid}", {"reservation_id": rid})
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    # configured as a client-mode server configures its kernels' managers: a restarter that
    # heeds a kernel's final end (server/kernel_manager.py)
    users_server = UsersServer(config=restarter_config(Config()))
    km = ServerKernelManager(parent=users_server, kernel_name=name, kernel_spec_manager=specs)
    # handed to the kernel's own manager as the server's kernel manager does (pre_start_kernel)
    km.gpuhive_service, km.gpuhive_provisioner = link, TeamProvisioner
    await km.start_kernel()
    fired: list[str] = []  # the restarter's callbacks (jupyter_server's: 'dead' ends it)
    km.add_restart_callback(lambda: fired.append("dead"), "dead")
    km.add_restart_callback(lambda: fired.append("restart"), "restart")
    client = km.client()
    try:
        assert type(km.provisioner) is TeamProvisioner
        kid = km.kernel_id
        record = service.registry.get(kid)
        assert (record.owner, record.unix_user, record.gpus) == ("alice", "gh-alice", ("kbr:1",))
        client.start_channels()
        await client.wait_for_ready(timeout=30)

        # An admin may interrupt alice's kernel through the service: the cell stops.
        msg_id = client.execute("import time; time.sleep(60)")
        await asyncio.sleep(1.0)
        signalled = await api("boss")("POST", f"kernels/{kid}/signal", {"signal": "SIGINT"})
        assert signalled.status == 200 and signalled.body["running"] is True, signalled
        reply = await client.get_shell_msg(timeout=15)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        # bob may not; nor may the admin launch: a launch runs as the reservation's owner and
        # answers the kernel's key, so it is the owner's alone (this kernel, or a new one).
        boss, on_hers = api("boss"), {"reservation_id": rid}
        refused = {
            "bob signals": await api("bob")("POST", f"kernels/{kid}/signal", {"signal": "SIGINT"}),
            "admin relaunches hers": await boss("POST", f"kernels/{kid}/launch", on_hers),
            "admin launches on her reservation":
                await boss("POST", f"kernels/{uuid.uuid4()}/launch", on_hers),
        }  # fmt: skip
        assert {k: r.status for k, r in refused.items()} == dict.fromkeys(refused, 403), refused
        assert "only alice or an admin may signal" in refused["bob signals"].message
        assert "only alice may start it" in refused["admin relaunches hers"].message
        assert (
            "only alice can start a kernel" in refused["admin launches on her reservation"].message
        )
        assert [k.kernel_id for k in service.registry.live()] == [kid]
        assert record.restarts == 0 and record.pid is not None and alive(record.pid)

        # The reservation ends (alice ends it early, a few seconds ahead); the service's
        # lifecycle shuts the kernel down (the default policy). alice's server reports it
        # dead with that reason and does not restart it.
        soon_end = datetime.now(UTC) + timedelta(seconds=AHEAD_S)
        ended = await api("alice")("PATCH", f"reservations/{rid}", {"end": iso(soon_end)})
        assert ended.status == 200, ended
        end = datetime.fromisoformat(ended.body["end"])
        assert await until(lambda: "dead" in fired, LENGTH + 15), (fired, record)
        assert datetime.now(UTC) >= end
        reason = f"shut down: its reservation {rid} ended at {end:%Y-%m-%d %H:%M} UTC"
        assert km.reason == f"Kernel dead: {reason}.", km.reason
        assert (record.state, record.reason, record.restarts) == ("ended", reason, 0)
        await asyncio.sleep(4)  # one more restarter poll: still no restart
        assert fired == ["dead"] and not await km.is_alive()
        assert not alive(record.pid)
        polled = await api("alice")("GET", f"kernels/{kid}/process")
        assert polled.body == {"running": False, "exit_status": 0, "state": "ended",
                               "reason": reason}, polled  # fmt: skip
    finally:
        client.stop_channels()
        km.stop_restarter()
        await km.shutdown_kernel(now=True)
