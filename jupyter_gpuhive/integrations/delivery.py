"""How a webhook event reaches an endpoint: the signature, the address guard, the deliveries.

This is the one way HTTP leaves gpuhive for a message (tests/test_architecture.py holds it):
`Sender` posts, signed, to one destination through the transport the Hive was wired with
(transport.py), which connects only to what its PinnedResolver checked; the courier's
`Deliveries` and the violation handler `webhook` (protection/handlers/webhook.py) both use
it. A destination an admin set (a site webhook; a handler in the server's configuration) is
`site=True` and may point anywhere; a user's own endpoint gets public addresses only.

`Deliveries` runs in the courier's process (courier.py), never on the server's loop. Each
endpoint has its own queue, worker and transport, and every attempt has a timeout: an
endpoint that hangs or fails delays only its own deliveries. A failed attempt is retried after
an exponential backoff with jitter; after `max_attempts` failures the delivery is dead (a dead
letter, kept in the log). The log (one row per delivery, one per attempt) is written in
batches, off the delivery path; on SQLite to a file of its own (store/webhooks.py), so that
its writes never hold the lock the server's bookings take. Each endpoint's transport connects
only to addresses its PinnedResolver checked (addresses.py: users' own endpoints only to
public ones).

Signature (docs/integrations.md): `X-Gpuhive-Signature: v1=HEX`, HEX the HMAC-SHA256 with the
endpoint's secret over `TIMESTAMP + "." + body`, TIMESTAMP the Unix seconds in
`X-Gpuhive-Timestamp`. Receivers refuse stale timestamps (replay) and dedupe on
`Idempotency-Key` (the event's id, the same on every attempt and every endpoint).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..store.integrations import Integrations
from ..store.webhooks import Webhook
from .addresses import PinnedResolver, host_port, public_only
from .transport import Request, Transports

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Gpuhive-Signature"
TIMESTAMP_HEADER = "X-Gpuhive-Timestamp"
EVENT_HEADER = "X-Gpuhive-Event"
IDEMPOTENCY_HEADER = "Idempotency-Key"
TOLERANCE = 300  # seconds a receiver should accept a timestamp for
LOG_INTERVAL = 0.2  # seconds between writes of the delivery log (one transaction each)
PER_ENDPOINT = 4  # attempts in flight per endpoint (each bounded by the timeout)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for a body sent at `timestamp`."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    signature: str,
    tolerance: int = TOLERANCE,
    now: float | None = None,
) -> bool:
    """For receivers: the signature matches and the timestamp is fresh."""
    if not timestamp.isdigit():
        return False
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, int(timestamp), body), signature)


@dataclass(frozen=True)
class WebhookSettings:
    """Delivery limits; `allowed_hosts` are shell-style patterns endpoint hosts must match."""

    timeout: float = 10.0
    max_attempts: int = 6
    backoff: float = 5.0
    backoff_cap: float = 900.0
    allowed_hosts: tuple[str, ...] = ("*",)
    allow_private: bool = False  # users' own endpoints may point at non-public addresses


def checked(settings: WebhookSettings, site: bool) -> bool:
    """Whether an endpoint may only get public addresses: a user's own, unless allowed."""
    return not (site or settings.allow_private)


async def guarded(settings: WebhookSettings, site: bool, url: str) -> str | None:
    """Why `url` is refused to a personal (non-site) endpoint, or None."""
    return await public_only(url, settings.timeout) if checked(settings, site) else None


@dataclass(frozen=True)
class Attempt:
    """What one POST came to: the status (None: no answer), the error (None: delivered)."""

    status: int | None
    error: str | None
    took: float  # seconds


def backoff_delay(settings: WebhookSettings, attempts: int) -> float:
    """The wait after `attempts` failures: backoff·2^(n-1), capped, with ±50 % jitter."""
    base = min(settings.backoff_cap, settings.backoff * 2 ** (attempts - 1))
    return base * random.uniform(0.5, 1.5)


class Sender:
    """One destination's transport and pinned resolver: every message POST goes through one.

    `site` says who set the destination: True for an admin (a site webhook, a violation
    handler in the server's configuration), which may point anywhere; False for a user's own
    endpoint, which gets only public addresses unless the site allows private ones.
    """

    def __init__(
        self, settings: WebhookSettings, transports: Transports, *, site: bool, clients: int = 1
    ) -> None:
        self.settings = settings
        self.site = site
        self.resolver = PinnedResolver(
            timeout=settings.timeout, public_only=checked(settings, site)
        )
        self.transport = transports(self.resolver.resolve, connections=clients)

    async def post(
        self,
        url: str,
        body: bytes,
        *,
        event: str,
        event_id: str,
        secret: str | None,
        headers: dict[str, str] | None = None,
    ) -> Attempt:
        """One signed POST (unsigned without a secret) to the checked addresses of `url`."""
        stamp = int(time.time())
        sent = {
            "Content-Type": "application/json",
            "User-Agent": "jupyter-gpuhive webhooks",
            **(headers or {}),
            EVENT_HEADER: event,
            IDEMPOTENCY_HEADER: event_id,
            TIMESTAMP_HEADER: str(stamp),
        }
        if secret:
            sent[SIGNATURE_HEADER] = sign(secret, stamp, body)
        request = Request("POST", url, sent, body, self.settings.timeout)
        began = time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            await self.resolver.addresses(*host_port(url))  # NotSent: not checked ok
            reply = await self.transport.send(request)  # to those addresses only
            status = reply.status
            if status is None:
                error = reply.error or "no answer"
            elif not 200 <= status < 300:
                error = f"HTTP {status}"
        except Exception as failure:  # DNS, refused, TLS: the attempt failed
            error = str(failure) or type(failure).__name__
        return Attempt(status, error, time.monotonic() - began)

    async def deliver(self, url: str, body: bytes, **how: Any) -> list[Attempt]:
        """`post` until delivered or `max_attempts` failed, with the courier's backoff; every
        attempt (for callers that wait for the outcome, such as the violation ladder)."""
        attempts: list[Attempt] = []
        while True:
            attempts.append(await self.post(url, body, **how))
            if attempts[-1].error is None or len(attempts) >= self.settings.max_attempts:
                return attempts
            await asyncio.sleep(backoff_delay(self.settings, len(attempts)))

    def close(self) -> None:
        """Close the transport."""
        self.transport.close()


@dataclass(frozen=True)
class Event:
    """One event as handed to the courier: its targets are already chosen."""

    id: str
    name: str
    at: datetime
    text: str
    data: dict[str, Any]
    targets: tuple[Webhook, ...]

    def bodies(self) -> dict[str, bytes]:
        """The body per format: generic JSON, and Slack's incoming-webhook shape."""
        wanted = {w.format for w in self.targets}
        generic = {"id": self.id, "event": self.name, "at": self.at.isoformat()}
        shapes = {
            "json": lambda: generic | {"text": self.text, "data": self.data},
            "slack": lambda: {"text": f"gpuhive: {self.text}"},
        }
        return {fmt: json.dumps(shapes[fmt]()).encode() for fmt in wanted}


@dataclass
class _Parcel:
    """One event on its way to one endpoint."""

    webhook: Webhook
    event_id: str
    event: str
    body: bytes
    attempts: int = 0


class Deliveries:
    """Queues, workers, retries and the batched log of every endpoint (one asyncio loop)."""

    def __init__(
        self,
        rows: Integrations,
        settings: WebhookSettings,
        transports: Transports,
        clock: Callable[[], datetime],
    ) -> None:
        self.rows = rows
        self.settings = settings
        self.transports = transports
        self.now = clock
        self._queues: dict[int, asyncio.Queue[_Parcel]] = {}
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._ops: list[tuple[Any, ...]] = []
        self._writer: asyncio.Task[None] | None = None

    def accept(self, event: Event) -> None:
        """Log and queue an event for each of its endpoints."""
        bodies = event.bodies()
        for webhook in event.targets:
            body = bodies[webhook.format]
            key = (webhook.id, event.id)
            self._log(("delivery", key, event.name, body.decode(), event.at))
            self._queue(webhook).put_nowait(_Parcel(webhook, event.id, event.name, body))

    def drop(self, webhook_id: int) -> None:
        """An endpoint was deleted: its queue and worker go."""
        self._queues.pop(webhook_id, None)
        worker = self._workers.pop(webhook_id, None)
        if worker is not None:
            worker.cancel()

    def _log(self, op: tuple[Any, ...]) -> None:
        """Queue one log entry; they are written in batches, off the delivery path."""
        self._ops.append(op)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_log())

    async def _write_log(self) -> None:
        """Write what accumulated in one transaction, every LOG_INTERVAL at most."""
        loop = asyncio.get_running_loop()
        while self._ops:
            await asyncio.sleep(LOG_INTERVAL)
            ops, self._ops = self._ops, []
            try:
                await loop.run_in_executor(None, self.rows.write_log, ops)
            except Exception:
                log.exception("gpuhive: could not write %d webhook log entries", len(ops))

    async def flushed(self) -> None:
        """Wait until the log holds everything accepted so far."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer})

    async def shutdown(self) -> None:
        """Cancel the workers and pending retries, then write the log."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        workers = list(self._workers.values())
        self._workers.clear()
        self._queues.clear()
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await self.flushed()

    def _queue(self, webhook: Webhook) -> asyncio.Queue[_Parcel]:
        queue = self._queues.get(webhook.id)
        if queue is None:
            queue = self._queues[webhook.id] = asyncio.Queue()
            self._workers[webhook.id] = asyncio.create_task(self._work(webhook, queue))
        return queue

    async def _work(self, webhook: Webhook, queue: asyncio.Queue[_Parcel]) -> None:
        """One endpoint's deliveries, at most PER_ENDPOINT at a time, each with a timeout."""
        sender = Sender(self.settings, self.transports, site=webhook.site, clients=PER_ENDPOINT)
        slots = asyncio.Semaphore(PER_ENDPOINT)
        running: set[asyncio.Task[None]] = set()

        async def one(parcel: _Parcel) -> None:
            try:
                await self._attempt(sender, queue, parcel)
            except Exception:  # never let one delivery stop the others
                log.exception("gpuhive: webhook %s event %s", parcel.webhook.id, parcel.event_id)
            finally:
                slots.release()

        try:
            while True:
                await slots.acquire()
                parcel = await queue.get()
                task = asyncio.create_task(one(parcel))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            sender.close()

    async def _attempt(
        self, sender: Sender, queue: asyncio.Queue[_Parcel], parcel: _Parcel
    ) -> None:
        webhook = parcel.webhook
        done = await sender.post(
            webhook.url, parcel.body, event=parcel.event, event_id=parcel.event_id,
            secret=webhook.secret,
        )  # fmt: skip
        error = done.error
        parcel.attempts += 1
        if error is None:
            state = "delivered"
        elif parcel.attempts >= self.settings.max_attempts:
            state = "dead"
            log.warning("gpuhive: webhook %s gave up on %s: %s", webhook.id, parcel.event_id, error)
        else:
            state = "pending"
            self._retry(queue, parcel)
        key = (webhook.id, parcel.event_id)
        self._log(("attempt", key, self.now(), done.status, error, done.took * 1000, state))

    def _retry(self, queue: asyncio.Queue[_Parcel], parcel: _Parcel) -> None:
        """Requeue after backoff·2^(n-1), capped, with ±50 % jitter."""
        delay = backoff_delay(self.settings, parcel.attempts)
        handle: asyncio.TimerHandle

        def put() -> None:
            self._timers.discard(handle)
            queue.put_nowait(parcel)

        handle = asyncio.get_running_loop().call_later(delay, put)
        self._timers.add(handle)
