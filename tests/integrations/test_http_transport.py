"""The one HTTP seam (integrations/transport.py): the domain signs, retries and guards
addresses whatever transport carries its requests, and the server's transport (tornado)
connects only to the addresses the guard gives it."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from jupyter_gpuhive.hive_settings import HiveSettings
from jupyter_gpuhive.integrations.addresses import NotSent
from jupyter_gpuhive.integrations.delivery import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Sender,
    WebhookSettings,
    sign,
    verify,
)
from jupyter_gpuhive.integrations.transport import Address, Request
from jupyter_gpuhive.protection.handlers.base import HandlerConfigError, HandlerContext
from jupyter_gpuhive.protection.handlers.webhook import WebhookHandler
from jupyter_gpuhive.server.http_transport import TornadoTransport
from tests.integrations.receiver import Receiver, receiving
from tests.support.http_transport import scripted

HOW = {"event": "violation", "event_id": "e-1", "secret": "whsec_t"}


async def test_a_post_is_signed_and_keyed_whatever_the_transport() -> None:
    transports = scripted()
    sender = Sender(WebhookSettings(timeout=3.0), transports, site=True)
    done = await sender.post("http://127.0.0.1:9/hook", b'{"a": 1}', **HOW)
    sender.close()
    assert (done.status, done.error) == (200, None)
    (sent,) = transports.sent
    headers = sent.request.headers
    assert verify("whsec_t", headers[TIMESTAMP_HEADER], b'{"a": 1}', headers[SIGNATURE_HEADER])
    assert headers[IDEMPOTENCY_HEADER] == "e-1"
    assert sent.addresses == [(socket.AF_INET, ("127.0.0.1", 9))]  # the guard's answer
    assert transports.closed == 1


async def test_a_users_internal_endpoint_never_reaches_the_transport() -> None:
    transports = scripted()
    sender = Sender(WebhookSettings(timeout=3.0), transports, site=False)
    for url in ("http://localhost:9/x", "http://169.254.169.254/latest/meta-data/"):
        done = await sender.post(url, b"{}", **HOW)
        assert done.status is None and (done.error or "").startswith("not sent: ")
    assert transports.sent == []


async def test_failed_answers_are_retried_with_one_key() -> None:
    transports = scripted(500, 503)
    settings = WebhookSettings(timeout=3.0, backoff=0.01, max_attempts=4)
    sender = Sender(settings, transports, site=True)
    attempts = await sender.deliver("http://127.0.0.1:9/hook", b"{}", **HOW)
    assert [(a.status, a.error) for a in attempts] == [
        (500, "HTTP 500"), (503, "HTTP 503"), (200, None)
    ]  # fmt: skip
    assert {s.request.headers[IDEMPOTENCY_HEADER] for s in transports.sent} == {"e-1"}


async def test_the_servers_transport_connects_only_where_the_guard_says() -> None:
    """A name no DNS knows reaches the local receiver: tornado asked the guard, nothing else."""
    asked: list[tuple[str, int]] = []

    with receiving(Receiver(secret="s")) as hook:

        async def guard(host: str, port: int, family: Any = socket.AF_UNSPEC) -> list[Address]:
            asked.append((host, port))
            if host == "inside.invalid":
                raise NotSent("not sent: inside.invalid is a loopback address")
            return [(socket.AF_INET, ("127.0.0.1", hook.port))]

        transport = TornadoTransport(guard, connections=1)
        try:
            stamp = str(int(time.time()))
            headers = {TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: sign("s", int(stamp), b"{}")}
            url = f"http://hook.invalid:{hook.port}/hook/x"
            done = await transport.send(Request("POST", url, headers, b"{}", 3.0))
            assert (done.status, done.error) == (200, None)
            assert [r.signed for r in hook.requests] == [True]
            refused = await transport.send(
                Request("POST", "http://inside.invalid:9/hook", {}, b"{}", 3.0)
            )
            assert refused.status is None and "not sent" in (refused.error or "")
        finally:
            transport.close()
    assert asked == [("hook.invalid", hook.port), ("inside.invalid", 9)]


def test_the_hive_and_the_ladders_webhook_need_a_transport() -> None:
    """A missing wire is an error at construction, not a silent default."""
    with pytest.raises(TypeError, match="http"):
        HiveSettings(db_url="sqlite://", policy=None)  # type: ignore[call-arg,arg-type]
    with pytest.raises(HandlerConfigError, match="no HTTP transport"):
        WebhookHandler("webhook", {"url": "https://example.org/h"}, HandlerContext())
    built = WebhookHandler(
        "webhook", {"url": "https://example.org/h"}, HandlerContext(http=scripted())
    )
    assert built.url == "https://example.org/h"
