"""A kernel's life bounded by its reservation: the warning, each end policy, the policy API.

Real Jupyter server, real reservations (relative to the server's clock), real kernels
started through the kernel REST API by the `gpuhive` provisioner as a real UNIX user on a
local host. The end-policy test books for ten minutes, so that no start on a loaded box can
outlast its reservations, and once its kernels run ends them early (PATCH end, as their
owner may) a few seconds ahead: the warning and the policies then come within seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpuhive.kernels.events import KERNEL_SCHEMA_ID
from jupyter_gpuhive.kernels.specs import spec_name
from jupyter_gpuhive.model import describe_instant
from tests.conftest import TOKENS, UTC, book, iso
from tests.kernels.remote_helpers import UNIX, local_host

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
LENGTH = 40  # seconds: the longest wait for a warning or an end policy (a loaded box)
WARN_S = 6  # the warning comes this long before the end
AHEAD_S = WARN_S + 3  # the early end, from when the kernels run: the warning is 3 s away


@pytest.fixture
def hive_config(hive_config: dict[str, Any], python: str) -> dict[str, Any]:
    host = local_host("kn1", 8, python)
    return {
        **hive_config,
        "hosts": [host],
        "unix_users": UNIX,
        "min_reservation": "1s",
        "kernel_warning_minutes": WARN_S / 60,
        "kernel_extend_by": "1m",
        "poll_interval": 0.5,
        "monitor": False,
    }


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    """The server with its extensions started (pytest-jupyter does not start them)."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


def headers(user: str) -> dict[str, str]:
    return {"Authorization": f"token {TOKENS[user]}"}


async def start_kernel(jp_fetch: Any, user: str, reservation_id: int) -> str:
    """POST api/kernels with the reservation's kernelspec, as `user`: the kernel id."""
    reply = await jp_fetch(
        "api", "kernels", method="POST", headers=headers(user),
        body=json.dumps({"name": spec_name(reservation_id)}),
    )  # fmt: skip
    return str(json.loads(reply.body)["id"])


async def kernel_alive(jp_fetch: Any, kernel_id: str) -> bool:
    try:
        await jp_fetch("api", "kernels", kernel_id, headers=headers("alice"))
    except HTTPClientError as error:
        assert error.code == 404, error
        return False
    return True


async def notices(api: Any, reservation_id: int) -> list[dict[str, Any]]:
    """The 'kernel-end' notices of a reservation (its owner's view of GET violations)."""
    reply = await api("alice")(
        "GET", "violations", params={"reservation": reservation_id, "kind": "kernel-end"}
    )
    assert reply.status == 200, reply
    return list(reply.body["violations"])


def handlers(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(a["handler"], a["outcome"]) for v in reversed(found) for a in v["actions"]]


async def until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.25)
    raise AssertionError(f"not within {timeout} s: {what}")


@SQLITE
async def test_each_end_policy_runs_when_its_reservation_ends(
    jp_fetch: Any, started: Any, api: Any
) -> None:
    jp_serverapp = started
    events: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        events.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=KERNEL_SCHEMA_ID, listener=listen)
    alice = api("alice")
    start = datetime.now(UTC)
    gpus = {"warn": "kn1:0", "interrupt": "kn1:1", "shutdown": "kn1:2", "extend": "kn1:3",
            "fallback": "kn1:4"}  # fmt: skip
    made = {
        policy: (await book(alice, policy, [gpu], start, "10m")).body
        for policy, gpu in gpus.items()
    }
    kernels = {p: await start_kernel(jp_fetch, "alice", r["id"]) for p, r in made.items()}
    for policy, kid in kernels.items():
        body = {"policy": "extend", "fallback": "interrupt"} if policy == "fallback" else {
            "policy": policy}  # fmt: skip
        chosen = await alice("PUT", f"kernels/{kid}/policy", body)
        assert chosen.status == 200, chosen
        assert chosen.body["policy"] == body["policy"]
        assert chosen.body["reservation_id"] == made[policy]["id"]
        assert chosen.body["gpus"] == [gpus[policy]]
    listed = await alice("GET", "kernels")
    assert {k["id"] for k in listed.body["kernels"]} == set(kernels.values())
    assert (await api("bob")("GET", "kernels")).body["kernels"] == []

    # A cell that runs past the end, in the kernel that will be interrupted.
    manager = jp_serverapp.kernel_manager
    client = manager.get_kernel(kernels["interrupt"]).client()
    client.start_channels()
    await client.wait_for_ready(timeout=30)
    client.execute("import time; time.sleep(600)")

    # The kernels run: their reservations end early, all at one instant a few seconds ahead.
    soon_end = datetime.now(UTC) + timedelta(seconds=AHEAD_S)
    for policy, booked in made.items():
        ended = await alice("PATCH", f"reservations/{booked['id']}", {"end": iso(soon_end)})
        assert ended.status == 200, ended
        made[policy] = ended.body
    end = datetime.fromisoformat(made["warn"]["end"])
    assert {datetime.fromisoformat(r["end"]) for r in made.values()} == {end}
    assert not [e for e in events if e["kind"] == "warning"]  # ten minutes ahead: none due
    # The slot after 'fallback' is bob's: its extension fails, and its fallback runs.
    await book(api("bob"), "next", [gpus["fallback"]], end + timedelta(seconds=1), "10m")

    # The warning reaches every kernel WARN_S before the end, and is recorded.
    warned = await until(
        lambda: asyncio.sleep(0, {e["kernel_id"] for e in events if e["kind"] == "warning"}
                              >= set(kernels.values())),
        LENGTH, "a warning for each kernel",
    )  # fmt: skip
    assert warned
    first = next(e for e in events if e["kind"] == "warning")
    assert "ends at" in first["message"] and first["owner"] == "alice"
    assert datetime.now(UTC) < end  # before the end

    # At the end each policy runs.
    await until(lambda: kernel_alive_not(jp_fetch, kernels["shutdown"]), LENGTH + 15, "shut down")
    reply = await client.get_iopub_msg(timeout=LENGTH)
    while reply["msg_type"] != "error":
        reply = await client.get_iopub_msg(timeout=LENGTH)
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert datetime.now(UTC) >= end - timedelta(seconds=1)
    client.stop_channels()

    assert await kernel_alive(jp_fetch, kernels["warn"])
    assert await kernel_alive(jp_fetch, kernels["interrupt"])
    extended = (await alice("GET", f"reservations/{made['extend']['id']}")).body
    assert datetime.fromisoformat(extended["end"]) == end + timedelta(minutes=1)
    assert await kernel_alive(jp_fetch, kernels["extend"])
    fallback = (await alice("GET", f"reservations/{made['fallback']['id']}")).body
    assert datetime.fromisoformat(fallback["end"]) == end  # bob's slot comes next

    # Every warning and action is recorded like a violation action.
    want = {
        "warn": [("kernel-warning", "ok"), ("kernel-warn", "ok")],
        "interrupt": [("kernel-warning", "ok"), ("kernel-interrupt", "ok")],
        "shutdown": [("kernel-warning", "ok"), ("kernel-shutdown", "ok")],
        "extend": [("kernel-warning", "ok"), ("kernel-extend", "ok")],
        "fallback": [("kernel-warning", "ok"), ("kernel-extend", "failed"),
                     ("kernel-interrupt", "ok")],
    }  # fmt: skip
    for policy, expected in want.items():
        found = await until(
            lambda p=policy, n=len(want[policy]): _recorded(api, made[p]["id"], n),
            10, f"{policy}'s records",
        )  # fmt: skip
        assert handlers(found) == expected, policy
        assert all(v["holder"] == "alice" and v["offender"] is None for v in found)
    kinds = {(e["kernel_id"], e["kind"]) for e in events}
    assert (kernels["extend"], "extended") in kinds
    assert (kernels["fallback"], "extend-failed") in kinds
    assert (kernels["shutdown"], "ended") in kinds


async def _recorded(api: Any, reservation_id: int, count: int) -> list[dict[str, Any]] | None:
    found = await notices(api, reservation_id)
    return found if len(handlers(found)) >= count else None


async def kernel_alive_not(jp_fetch: Any, kernel_id: str) -> bool:
    return not await kernel_alive(jp_fetch, kernel_id)


@SQLITE
async def test_policy_choices_are_checked(jp_fetch: Any, started: Any, api: Any) -> None:
    alice = api("alice")
    made = (await book(alice, "p", ["kn1:5"], datetime.now(UTC), "10m")).body
    kid = await start_kernel(jp_fetch, "alice", made["id"])
    mine = (await alice("GET", f"kernels/{kid}")).body
    assert (mine["policy"], mine["fallback"]) == ("shutdown", "shutdown")  # the site's default
    assert mine["end"] == made["end"] and 0 < mine["seconds_left"] <= 600

    unknown = await alice("PUT", f"kernels/{kid}/policy", {"policy": "explode"})
    assert unknown.status == 422 and "warn, interrupt, shutdown, extend" in unknown.message
    loop = await alice("PUT", f"kernels/{kid}/policy", {"policy": "extend", "fallback": "extend"})
    assert loop.status == 422 and "cannot be 'extend'" in loop.message
    wrong_type = await alice("PUT", f"kernels/{kid}/policy", {"policy": 3})
    assert wrong_type.status == 400
    extra = await alice("PUT", f"kernels/{kid}/policy", {"policy": "warn", "when": "now"})
    assert extra.status == 400

    theirs = await api("bob")("PUT", f"kernels/{kid}/policy", {"policy": "warn"})
    assert theirs.status == 403 and "alice" in theirs.message
    assert (await api("bob")("GET", f"kernels/{kid}")).status == 403
    admin = await api("boss")("PUT", f"kernels/{kid}/policy", {"policy": "warn"})
    assert admin.status == 200 and admin.body["policy"] == "warn"
    missing = await alice("PUT", "kernels/no-such-kernel/policy", {"policy": "warn"})
    assert missing.status == 404 and "no-such-kernel" in missing.message
    assert (await alice("GET", "kernels/no-such-kernel")).status == 404


@SQLITE
async def test_a_kernel_cannot_start_outside_its_reservation(
    jp_fetch: Any, started: Any, api: Any
) -> None:
    later = datetime.now(UTC) + timedelta(hours=2)
    made = (await book(api("alice"), "later", ["kn1:6"], later, "1h")).body
    with pytest.raises(HTTPClientError) as refused:
        await start_kernel(jp_fetch, "alice", made["id"])
    assert refused.value.code == 409
    message = json.loads(refused.value.response.body)["message"]  # type: ignore[union-attr]
    assert "has not started yet" in message and str(made["id"]) in message
    assert iso(later)[:10] in message or later.astimezone().strftime("%Y-%m-%d") in message


@SQLITE
async def test_a_kernel_on_an_ended_reservation_is_refused_in_one_short_sentence(
    jp_fetch: Any, started: Any, api: Any, hive_config: dict[str, Any]
) -> None:
    """What JupyterLab's small 'Error Starting Kernel' dialog shows after the reservation
    ended (#48 item 5): when it ended, on the site's clock, and what to do; no ISO time."""
    alice = api("alice")
    made = (await book(alice, "given back", ["kn1:7"], datetime.now(UTC), "10m")).body
    ended = await alice("DELETE", f"reservations/{made['id']}")
    assert ended.status == 200 and ended.body["status"] == "ended", ended
    with pytest.raises(HTTPClientError) as refused:
        await start_kernel(jp_fetch, "alice", made["id"])
    assert refused.value.code == 409
    message = json.loads(refused.value.response.body)["message"]  # type: ignore[union-attr]
    end = datetime.fromisoformat(ended.body["end"])
    when = describe_instant(end, ZoneInfo(hive_config["site_timezone"]))
    assert message == (
        f"Reservation {made['id']} ended at {when}: book GPUs again in the GPU sidebar to "
        "start a kernel on them."
    ), message
    assert len(message) <= 120 and message.count(". ") == 0, message
