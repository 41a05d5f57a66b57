"""A real webhook receiver on 127.0.0.1 (tornado) that checks signatures like a site would."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application, RequestHandler

from tests.support.waiting import until


@dataclass
class Received:
    """One request as the receiver saw it."""

    at: float
    key: str
    event: str
    body: dict[str, Any]
    signed: bool
    fresh: bool
    answered: int


@dataclass
class Receiver:
    """Answers `script` statuses in turn (then 200); 'hang' never answers."""

    script: list[int | str] = field(default_factory=list)
    secret: str = ""
    requests: list[Received] = field(default_factory=list)
    seen_keys: set[str] = field(default_factory=set)
    new_events: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    hang: bool = False
    hung: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/path-secret-abcd"

    def signed_ok(self, stamp: str, body: bytes, signature: str) -> bool:
        expected = hmac.new(self.secret.encode(), stamp.encode() + b"." + body, hashlib.sha256)
        return hmac.compare_digest("v1=" + expected.hexdigest(), signature)

    async def until(self, count: int, timeout: float = 10.0) -> None:
        """Wait until `count` new (deduplicated) events arrived."""
        try:
            await until(lambda: len(self.new_events) >= count, timeout, f"{count} events", 0.02)
        except TimeoutError as error:
            raise AssertionError(f"{error}; requests: {self.requests}") from None


class _Hook(RequestHandler):
    def initialize(self, receiver: Receiver) -> None:
        self.receiver = receiver

    async def post(self, _rest: str) -> None:
        r = self.receiver
        if r.hang:
            r.hung += 1
            await r.release.wait()  # until the test ends; the sender times out first
            self.set_status(200)
            self.finish("late")
            return
        headers = self.request.headers
        stamp = headers.get("X-Gpuhive-Timestamp", "")
        signed = bool(r.secret) and r.signed_ok(
            stamp, self.request.body, headers.get("X-Gpuhive-Signature", "")
        )
        fresh = stamp.isdigit() and abs(time.time() - int(stamp)) <= 300
        answer = r.script.pop(0) if r.script else 200
        status = int(answer) if signed and fresh else 401
        key = headers.get("Idempotency-Key", "")
        body = json.loads(self.request.body)
        r.requests.append(
            Received(time.monotonic(), key, headers.get("X-Gpuhive-Event", ""), body,
                     signed, fresh, status)
        )  # fmt: skip
        if status == 200 and key not in r.seen_keys:  # a retry is not a new event
            r.seen_keys.add(key)
            r.new_events.append(body)
        self.set_status(status)
        self.finish("ok" if status == 200 else "no")


@contextmanager
def receiving(receiver: Receiver) -> Iterator[Receiver]:
    """Serve `receiver` on 127.0.0.1 while the block runs."""
    sock, port = bind_unused_port()
    receiver.port = port
    server = HTTPServer(Application([(r"/hook(.*)", _Hook, {"receiver": receiver})]))
    server.add_sockets([sock])
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.stop()
