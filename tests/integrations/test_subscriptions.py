"""Availability subscriptions: fired by a real cancellation, through Lab, e-mail and webhook;
"book it" books exactly the offered slot, and racing a second user exactly one wins."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

from jupyter_gpuhive.integrations.subscriptions import AVAILABILITY_SCHEMA_ID
from tests.conftest import UTC, book, iso
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook
from tests.protection.conftest import Mailbox
from tests.support.waiting import until


@pytest.fixture
def hive_config(hive_config: dict[str, Any], smtp_server: Mailbox) -> dict[str, Any]:
    return {
        **hive_config,
        "notify_email": {
            "host": "127.0.0.1",
            "port": smtp_server.port,
            "sender": "gpuhive@example.org",
            "address_template": "{user}@example.org",
        },
        "webhook_allow_private": True,  # the receivers listen on 127.0.0.1
    }


async def test_fired_by_a_cancellation_through_every_channel_and_booked_once(
    api: Any, jp_serverapp: Any, smtp_server: Mailbox
) -> None:
    alice, bob, carol = api("alice"), api("bob"), api("carol")
    toasts: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        toasts.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=AVAILABILITY_SCHEMA_ID, listener=listen)
    now = jp_serverapp.web_app.settings["gpuhive"].now()
    deadline = now + timedelta(hours=20)
    # carol holds all of gpu3 from now until after the deadline: nothing to offer yet
    everything = await book(carol, "all of gpu3", [f"gpu3:{i}" for i in range(4)], now, "1d")
    with receiving(Receiver()) as hook:
        await add_hook(alice, hook, events=["gpus.available"])
        made = await alice(
            "POST", "subscriptions",
            {"gpus": 2, "host": "gpu3", "duration": "4h", "deadline": iso(deadline)},
        )  # fmt: skip
        assert made.status == 201, made
        sub = made.body
        assert (
            sub["active"] and sub["fired"] == 0 and sub["channels"] == ["email", "lab", "webhook"]
        )
        await asyncio.sleep(0.5)
        assert (await alice("GET", f"subscriptions/{sub['id']}")).body["fired"] == 0
        early = await alice("POST", f"subscriptions/{sub['id']}/book")
        assert early.status == 409 and "not offered" in early.message

        # a real cancellation (carol ends her running reservation now) frees the GPUs
        assert (await carol("DELETE", f"reservations/{everything.body['id']}")).status == 200
        await hook.until(1)
        await until(lambda: toasts and smtp_server.messages)
    offer = hook.new_events[0]["data"]["offer"]
    assert offer["gpus"] == ["gpu3:0", "gpu3:1"] and offer["host"] == "gpu3"
    start, end = (offer["start"], offer["end"])
    assert datetime.fromisoformat(end) - datetime.fromisoformat(start) == timedelta(hours=4)
    assert offer["book"] == {"method": "POST", "path": f"subscriptions/{sub['id']}/book"}
    assert offer["magic"].startswith("%gpureserve gpu3:0,1 --start ")
    (toast,) = toasts
    assert toast["user"] == "alice" and toast["offer"] == offer
    (mail,) = smtp_server.messages
    assert mail["to"] == ["alice@example.org"]
    assert "2 GPUs free on gpu3" in mail["data"]  # the subject: words for people
    assert "2 GPUs are free for alice: gpu3:0, gpu3:1" in mail["data"]
    assert "'Book it' in the GPU sidebar, or %gpureserve gpu3:0,1" in mail["data"]
    assert "POST subscriptions" not in mail["data"] and "GPU(s)" not in mail["data"]
    fired = (await alice("GET", f"subscriptions/{sub['id']}")).body
    assert fired["fired"] == 1 and fired["active"] is False and fired["offer"] == offer

    # "book it" against bob booking the same GPUs at the same moment: exactly one wins
    race = await asyncio.gather(
        alice("POST", f"subscriptions/{sub['id']}/book"),
        bob("POST", "reservations",
            {"title": "mine", "gpus": ["gpu3:1"], "start": iso(datetime.fromisoformat(start)
                                                              + timedelta(minutes=1)),
             "duration": "1h"}),
    )  # fmt: skip
    assert sorted(r.status for r in race) == [201, 409], race
    if race[0].status == 201:
        won = race[0].body
        assert won["owner"] == "alice" and won["gpus"] == ["gpu3:0", "gpu3:1"]
        assert won["end"] == end
    again = await alice("POST", f"subscriptions/{sub['id']}/book")
    assert again.status == 409

    # it fired once: another release does not tell alice again
    other = await book(carol, "later", ["gpu3:2", "gpu3:3"], now + timedelta(hours=6), "1h")
    assert (await carol("DELETE", f"reservations/{other.body['id']}")).status == 200
    await asyncio.sleep(0.5)
    assert len(toasts) == 1 and len(smtp_server.messages) == 1


async def test_subscription_input_and_ownership(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    cases = [
        ({}, 422, "'duration' is required"),
        ({"duration": "1h", "gpus": "two"}, 400, "whole number"),
        ({"duration": "1h", "gpus": 0}, 422, "from 1"),
        ({"duration": "1h", "host": "gpu9"}, 422, "Unknown host"),
        ({"duration": "1h", "channels": ["pigeon"]}, 422, "lab, email, webhook"),
        ({"duration": "1h", "deadline": iso(datetime.now(UTC) + timedelta(minutes=30))}, 422,
         "no room"),
        ({"duration": "1h", "repeat": "yes"}, 400, "true or false"),
        ({"duration": "1h", "email": "nobody"}, 422, "e-mail"),
        ({"duration": "1h", "colour": "red"}, 400, "colour"),
    ]  # fmt: skip
    for body, status, words in cases:
        reply = await alice("POST", "subscriptions", body)
        assert reply.status == status and words in reply.message, (body, reply)
    made = await alice("POST", "subscriptions", {"duration": "1h", "model": "A100",
                                                 "channels": ["lab"], "repeat": True})  # fmt: skip
    assert made.status == 201, made
    assert (await bob("GET", f"subscriptions/{made.body['id']}")).status == 404
    assert (await bob("DELETE", f"subscriptions/{made.body['id']}")).status == 404
    assert (await bob("GET", "subscriptions")).body == {"subscriptions": []}
    assert [s["id"] for s in (await api("boss")("GET", "subscriptions")).body["subscriptions"]] == [
        made.body["id"]
    ]
    assert (await alice("DELETE", f"subscriptions/{made.body['id']}")).status == 200
    assert (await alice("GET", f"subscriptions/{made.body['id']}")).status == 404
    again = await alice("POST", "subscriptions", {"duration": "1h", "channels": ["lab"]})
    assert again.status == 201 and again.body["id"] > made.body["id"]  # ids are never reused


async def fired(call: Any, sub_id: int) -> dict[str, Any]:
    """The subscription once it fired."""

    async def check() -> dict[str, Any] | None:
        reply = await call("GET", f"subscriptions/{sub_id}")
        return reply.body if reply.body["fired"] else None

    found: dict[str, Any] = await until(check, what=f"subscription {sub_id} to fire")
    return found


async def test_without_a_deadline_only_gpus_free_from_now_on_count(
    api: Any, jp_serverapp: Any
) -> None:
    alice, carol = api("alice"), api("carol")
    now = jp_serverapp.web_app.settings["gpuhive"].now()
    # gpu2 is carol's for the next 2 hours: free after that, not now
    gpu2 = [f"gpu2:{i}" for i in range(4)]
    held = await book(carol, "all of gpu2", gpu2, now, "2h")
    made = await alice("POST", "subscriptions", {"gpus": 2, "host": "gpu2", "duration": "1h"})
    assert made.status == 201, made
    sub = made.body
    assert sub["starts_now"] is True and sub["active"]
    watch = datetime.fromisoformat(sub["deadline"]) - datetime.fromisoformat(sub["created_at"])
    assert watch == timedelta(hours=24)  # then it ends, unfired
    # The slot after carol's booking does not count, on the first check nor after a release.
    other = await book(carol, "elsewhere", ["gpu3:0"], now + timedelta(hours=5), "1h")
    assert (await carol("DELETE", f"reservations/{other.body['id']}")).status == 200
    await asyncio.sleep(0.5)
    assert (await alice("GET", f"subscriptions/{sub['id']}")).body["fired"] == 0
    # carol ends early: gpu2 is free now, and that fires it
    assert (await carol("DELETE", f"reservations/{held.body['id']}")).status == 200
    offer = (await fired(alice, sub["id"]))["offer"]
    assert offer["gpus"] == ["gpu2:0", "gpu2:1"]
    start = datetime.fromisoformat(offer["start"])
    assert abs(start - datetime.now(UTC)) < timedelta(minutes=1)
    assert datetime.fromisoformat(offer["end"]) - start == timedelta(hours=1)
    # with a deadline, a later slot is offered at once (the user named the window)
    late = await book(carol, "gpu2 again", gpu2, datetime.now(UTC) + timedelta(seconds=1), "2h")
    ahead = await alice(
        "POST", "subscriptions",
        {"gpus": 2, "host": "gpu2", "duration": "1h", "deadline": iso(now + timedelta(hours=6))},
    )  # fmt: skip
    assert ahead.status == 201 and ahead.body["starts_now"] is False
    offered = (await fired(alice, ahead.body["id"]))["offer"]
    assert datetime.fromisoformat(offered["start"]) == datetime.fromisoformat(late.body["end"])
