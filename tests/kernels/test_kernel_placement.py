"""Where a reservation kernel goes, and the starts that are refused before anything runs.

Real Jupyter server and kernel REST API, real reservations, real kernels as a real UNIX user
on two `local` hosts (one reservation may hold GPUs on both).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TOKENS, UTC, book, soon
from tests.kernels.remote_helpers import (
    REPORT,
    UNIX,
    Notebook,
    kernels_api,
    local_host,
    report,
    sessions_api,
)
from tests.kernels.remote_helpers import write_spec as spec

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
MOST, FEWER, OTHER = "kpa", "kpb", "kpc"  # the reservation: 2 GPUs on kpa, 1 on kpb


@pytest.fixture
def hive_config(hive_config: dict[str, Any], python: str) -> dict[str, Any]:
    hosts = [local_host(name, 3, python) for name in (MOST, FEWER, OTHER)]
    return {**hive_config, "hosts": hosts, "unix_users": UNIX, "kernel_specs": False,
            "min_reservation": "10s", "monitor": False}  # fmt: skip


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    """The server with its extensions started (pytest-jupyter does not start them)."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


async def start(jp_fetch: Any, name: str) -> Any:
    return await kernels_api(jp_fetch, TOKENS["alice"], "POST", body={"name": name})


@SQLITE
async def test_a_cancelled_reservation_starts_no_kernel(
    started: Any, api: Any, jp_fetch: Any, jp_data_dir: Path
) -> None:
    made = await book(api("alice"), "cancelled", [f"{MOST}:2"], soon(2), "1h")
    rid = made.body["id"]
    assert (await api("alice")("DELETE", f"reservations/{rid}")).status == 200
    name = spec(jp_data_dir, "cancelled", {"reservation_id": rid})
    refused = await start(jp_fetch, name)
    assert refused.status == 409, refused
    message = f"Reservation {rid} was cancelled: no kernel can start on it."
    assert refused.body["message"] == message  # not 'has not started yet': it never will
    # The same through a session (how JupyterLab opens a notebook), not a 500.
    body = {"kernel": {"name": name}, "path": "c.ipynb", "type": "notebook", "name": "c.ipynb"}
    session = await sessions_api(jp_fetch, TOKENS["alice"], "POST", body=body)
    assert (session.status, session.body["message"]) == (409, message), session
    assert (await sessions_api(jp_fetch, TOKENS["alice"], "GET")).body == []
    assert (await kernels_api(jp_fetch, TOKENS["alice"], "GET")).body == []


@SQLITE
async def test_a_kernel_goes_to_the_host_with_most_gpus_unless_its_spec_names_another(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path
) -> None:  # fmt: skip
    gpus = [f"{FEWER}:0", f"{MOST}:0", f"{MOST}:1"]  # the fewer host first: no order effect
    made = await book(api("alice"), "two hosts", gpus, datetime.now(UTC), "10m")
    rid = made.body["id"]
    registry = started.web_app.settings["gpuhive"].kernels

    default = await start(jp_fetch, spec(jp_data_dir, "default", {"reservation_id": rid}))
    assert default.status == 201, default
    record = registry.get(default.body["id"])
    assert (record.host, record.gpus) == (MOST, (f"{MOST}:0", f"{MOST}:1"))

    chosen = await start(jp_fetch, spec(jp_data_dir, "chosen", {"reservation_id": rid,
                                                                "host": FEWER}))  # fmt: skip
    assert chosen.status == 201, chosen
    other = registry.get(chosen.body["id"])
    assert (other.host, other.gpus) == (FEWER, (f"{FEWER}:0",))
    nb = await Notebook.open(jp_ws_fetch, other.kernel_id, TOKENS["alice"])
    seen = report(await nb.run(REPORT))
    nb.close()
    assert (seen["user"], seen["cuda"]) == (UNIX["alice"], other.gpu_uuids[0])
    assert seen["cuda"] not in record.gpu_uuids

    # A host the reservation has no GPU on (configured or not) is the spec's mistake: 422.
    for host in (OTHER, "nope"):
        wrong = await start(jp_fetch, spec(jp_data_dir, f"on-{host}", {"reservation_id": rid,
                                                                      "host": host}))  # fmt: skip
        assert wrong.status == 422, wrong
        assert wrong.body["message"] == (
            f"The kernelspec asks for host '{host}', but reservation {rid} has no GPU there: "
            f"name one of {MOST}, {FEWER} (or leave 'host' out for {MOST})."
        )
    listed = await kernels_api(jp_fetch, TOKENS["alice"], "GET")
    assert {k["id"] for k in listed.body} == {record.kernel_id, other.kernel_id}
    for kid in (record.kernel_id, other.kernel_id):
        assert (await kernels_api(jp_fetch, TOKENS["alice"], "DELETE", kid)).status == 204


@SQLITE
async def test_the_servers_environment_does_not_pick_a_reservation(
    started: Any, api: Any, jp_fetch: Any, jp_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's kernel env is the server's whole os.environ (jupyter_server), so a
    reservation id there is no user's choice: a spec without one is refused."""
    made = await book(api("alice"), "env", [f"{MOST}:2"], datetime.now(UTC), "10m")
    monkeypatch.setenv("GPUHIVE_RESERVATION_ID", str(made.body["id"]))
    name = spec(jp_data_dir, "unnamed", {})
    body = {"kernel": {"name": name}, "path": "nb.ipynb", "type": "notebook", "name": "nb.ipynb"}
    refused = await sessions_api(jp_fetch, TOKENS["alice"], "POST", body=body)
    assert refused.status == 422, refused
    assert "names no reservation" in refused.body["message"], refused
    assert os.environ["GPUHIVE_RESERVATION_ID"] == str(made.body["id"])
    assert (await kernels_api(jp_fetch, TOKENS["alice"], "GET")).body == []
