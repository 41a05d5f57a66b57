"""Webhooks: signed, retried with one idempotency key, logged, dead-lettered; a hang delays nothing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from typing import Any

import pytest

from jupyter_gpuhive.integrations.webhooks import sign, verify
from jupyter_gpuhive.protection.handlers.base import SAMPLE, HandlerContext
from jupyter_gpuhive.protection.handlers.webhook import WebhookHandler
from jupyter_gpuhive.server.http_transport import TornadoTransport
from tests.conftest import book, soon
from tests.integrations.receiver import Receiver, receiving
from tests.support.waiting import until


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **hive_config,
        "webhook_backoff": 0.2,
        "webhook_timeout": 1.0,
        "webhook_max_attempts": 3,
        "webhook_allow_private": True,  # the receivers listen on 127.0.0.1
    }


async def add_hook(call: Any, receiver: Receiver, **extra: Any) -> dict[str, Any]:
    made = await call("POST", "webhooks", {"url": receiver.url, **extra})
    assert made.status == 201, made
    assert made.body["url"] == receiver.url and made.body["secret"].startswith("whsec_")
    receiver.secret = made.body["secret"]
    return made.body


async def log_of(call: Any, hook_id: int, done: int, timeout: float = 10.0) -> list[dict]:
    """The delivery log once `done` deliveries have finished (delivered or dead)."""

    async def finished() -> list[dict] | None:
        reply = await call("GET", f"webhooks/{hook_id}/deliveries")
        assert reply.status == 200, reply
        ended = [d for d in reply.body["deliveries"] if d["state"] != "pending"]
        return reply.body["deliveries"] if len(ended) >= done else None

    what = f"{done} finished deliveries of webhook {hook_id}"
    deliveries: list[dict] = await until(finished, timeout, what, interval=0.05)
    return deliveries


def test_signature_helpers_match_the_documented_scheme() -> None:
    body, stamp = b'{"a": 1}', int(time.time())
    mac = hmac.new(b"s3cret", f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert sign("s3cret", stamp, body) == "v1=" + mac
    assert verify("s3cret", str(stamp), body, "v1=" + mac)
    assert not verify("s3cret", str(stamp), body + b" ", "v1=" + mac)  # body changed
    assert not verify("other", str(stamp), body, "v1=" + mac)
    old = stamp - 301  # a replay after the tolerance
    assert not verify("s3cret", str(old), body, sign("s3cret", old, body))
    assert not verify("s3cret", "soon", body, "v1=" + mac)


async def test_retried_until_delivered_signed_with_one_idempotency_key(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    with receiving(Receiver(script=[500, 500])) as flaky:
        hook = await add_hook(alice, flaky, events=["reservation.created", "reservation.cancelled"])
        made = (await book(alice, "signed", ["gpu3:0"], soon(days=2))).body
        await book(bob, "not alice's", ["gpu3:1"], soon(days=2))  # not alice's event
        await flaky.until(1)
        await asyncio.sleep(0.6)  # room for a duplicate, should one come
        assert [r.answered for r in flaky.requests] == [500, 500, 200]
        assert {r.key for r in flaky.requests} == {flaky.requests[0].key}  # one key, 3 tries
        assert all(r.signed and r.fresh for r in flaky.requests)
        assert len(flaky.new_events) == 1
        event = flaky.new_events[0]
        assert event["event"] == "reservation.created" and event["id"] == flaky.requests[0].key
        assert event["data"]["reservation"]["id"] == made["id"]
        assert "alice booked 1 GPU on gpu3" in event["text"]
        gaps = [b.at - a.at for a, b in zip(flaky.requests, flaky.requests[1:], strict=False)]
        assert gaps[0] >= 0.09 and gaps[1] >= 0.19  # backoff 0.2 s, doubled, ±50 % jitter
        (delivery,) = await log_of(alice, hook["id"], 1)
        assert delivery["state"] == "delivered" and delivery["attempts"] == 3
        assert [a["status"] for a in delivery["log"]] == [500, 500, 200]
        assert delivery["event_id"] == event["id"]
        # the cancellation is a second event with its own key; an edit is filtered out
        assert (await alice("PATCH", f"reservations/{made['id']}", {"title": "x"})).status == 200
        assert (await alice("DELETE", f"reservations/{made['id']}")).status == 200
        await flaky.until(2)
        assert flaky.new_events[1]["event"] == "reservation.cancelled"
        assert flaky.new_events[1]["id"] != event["id"]
    # the URL and the secret are never shown again
    listed = await alice("GET", "webhooks")
    (shown,) = listed.body["webhooks"]
    assert "secret" not in shown and shown["url"] == f"http://127.0.0.1:{flaky.port}/…abcd"
    assert (await alice("GET", f"webhooks/{hook['id']}")).body == shown
    assert (await bob("GET", "webhooks")).body == {"webhooks": []}
    assert (await bob("GET", f"webhooks/{hook['id']}")).status == 404
    assert (await bob("GET", f"webhooks/{hook['id']}/deliveries")).status == 404
    assert (await bob("DELETE", f"webhooks/{hook['id']}")).status == 404
    assert [w["id"] for w in (await api("boss")("GET", "webhooks")).body["webhooks"]] == [
        hook["id"]
    ]


async def test_dead_letter_after_max_attempts_and_slack_format(api: Any) -> None:
    alice = api("alice")
    with receiving(Receiver(script=[500] * 10)) as broken:
        hook = await add_hook(alice, broken, format="slack")
        await book(alice, "never delivered", ["gpu3:2"], soon(days=3))
        (delivery,) = await log_of(alice, hook["id"], 1)
        assert delivery["state"] == "dead" and delivery["attempts"] == 3
        assert [a["status"] for a in delivery["log"]] == [500, 500, 500]
        assert all(a["error"] == "HTTP 500" for a in delivery["log"])
        assert list(broken.requests[0].body) == ["text"]  # Slack's incoming-webhook shape
        assert broken.requests[0].body["text"].startswith("gpuhive: alice booked 1 GPU")
        await asyncio.sleep(0.5)
        assert len(broken.requests) == 3  # nothing after the dead letter
    assert (await alice("DELETE", f"webhooks/{hook['id']}")).status == 200
    assert (await alice("GET", f"webhooks/{hook['id']}")).status == 404


async def test_a_hanging_endpoint_delays_nothing_else(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    with receiving(Receiver(hang=True)) as hanging, receiving(Receiver()) as healthy:
        site = await add_hook(boss, hanging, site=True)  # everyone's events
        await add_hook(alice, healthy)
        took, booked = [], []
        for hour in range(5):
            began = time.monotonic()
            await book(alice, f"run {hour}", ["gpu3:3"], soon(hour, days=4))
            booked.append(time.monotonic())
            took.append(booked[-1] - began)
        await healthy.until(5, timeout=3.0)
        assert hanging.hung >= 1  # the hanging endpoint really was being called meanwhile
        # Neither the API nor the healthy endpoint waited for the hanging one: that would take
        # at least its timeout (webhook_timeout, 1 s here) per booking.
        assert max(took) < 1.0, took
        arrived = [r.at for r in healthy.requests]
        assert all(a - b < 1.0 for a, b in zip(arrived, booked, strict=True)), (arrived, booked)
        # the hanging endpoint's deliveries time out, are retried, then dead-lettered
        dead = [d for d in (await log_of(boss, site["id"], 5, timeout=20)) if d["state"] == "dead"]
        assert len(dead) == 5 and all(len(d["log"]) == 3 for d in dead)
        assert all(a["status"] is None and "imeout" in a["error"] for a in dead[0]["log"])


async def test_endpoint_input_is_checked(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    cases = [
        ({"url": "ftp://example.org/x"}, 422, "http://"),
        ({"url": "http:///nohost"}, 422, "host"),
        ({"url": 5}, 400, "'url'"),
        ({"url": "http://127.0.0.1/x", "events": ["reservation.eaten"]}, 422, "eaten"),
        ({"url": "http://127.0.0.1/x", "events": []}, 422, "(none)"),
        ({"url": "http://127.0.0.1/x", "events": "all"}, 400, "list"),
        ({"url": "http://127.0.0.1/x", "format": "xml"}, 422, "json, slack"),
        ({"url": "http://127.0.0.1/x", "site": True}, 403, "admins"),
        ({"url": "http://127.0.0.1/x", "site": "yes"}, 400, "true or false"),
        ({"url": "http://127.0.0.1/x", "colour": "red"}, 400, "colour"),
    ]
    for body, status, words in cases:
        reply = await alice("POST", "webhooks", body)
        assert reply.status == status and words in reply.message, (body, reply)
    assert (await alice("GET", "webhooks")).body == {"webhooks": []}
    made = await boss("POST", "webhooks", {"url": "http://127.0.0.1:9/x", "site": True})
    assert made.status == 201 and made.body["site"] is True
    assert (await alice("GET", "webhooks/99")).status == 404
    assert (await alice("GET", "webhooks/1/deliveries", params={"limit": "0"})).status == 422


async def test_the_violation_ladders_webhook_handler_signs_the_same_way() -> None:
    with receiving(Receiver()) as hook:
        hook.secret = "ladder-secret"
        handler = WebhookHandler(
            "webhook",
            {"url": hook.url, "secret": hook.secret},
            HandlerContext(http=TornadoTransport),
        )
        outcome = await handler.handle(SAMPLE, {})
        assert outcome == f"POST {hook.url}: 200"
        (got,) = hook.requests
        assert got.signed and got.fresh and got.event == "violation" and got.key
        assert got.body["violation"]["gpu"] == SAMPLE.gpu
        unsigned = WebhookHandler(
            "webhook", {"url": hook.url}, HandlerContext(http=TornadoTransport)
        )
        failed = None
        try:
            await unsigned.handle(SAMPLE, {})
        except Exception as error:  # the receiver refuses unsigned bodies (401)
            failed = error
        assert failed is not None and "401" in str(failed)
        assert hook.requests[1].answered == 401
