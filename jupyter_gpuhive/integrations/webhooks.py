"""Webhooks: signed bodies, per-endpoint delivery queues, retries with backoff, a delivery log.

Each endpoint has its own queue, worker task and HTTP client, and every attempt has a
timeout: an endpoint that hangs or fails delays only its own deliveries, never the server,
the sweep or another endpoint. A failed attempt is retried after an exponential backoff with
jitter; after `max_attempts` failures the delivery is dead (a dead letter, kept in the log).

Signature (docs/integrations.md): `X-Gpuhive-Signature: v1=HEX`, HEX the HMAC-SHA256 with the
endpoint's secret over `TIMESTAMP + "." + body`, TIMESTAMP the Unix seconds in
`X-Gpuhive-Timestamp`. Receivers refuse stale timestamps (replay) and dedupe on
`Idempotency-Key` (the event's id, the same on every attempt and every endpoint).
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import hmac
import ipaddress
import json
import logging
import random
import secrets
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ..errors import BadRequest, Forbidden, Invalid, NotFound
from ..model import Identity
from ..store.integrations import Delivery, Integrations, Webhook

log = logging.getLogger(__name__)
T = TypeVar("T")

EVENTS = (
    "reservation.created",
    "reservation.changed",
    "reservation.cancelled",
    "reservation.starting",
    "reservation.ending",
    "gpus.available",
    "job.started",
    "job.succeeded",
    "job.failed",
    "violation",
)
FORMATS = ("json", "slack")
SIGNATURE_HEADER = "X-Gpuhive-Signature"
TIMESTAMP_HEADER = "X-Gpuhive-Timestamp"
EVENT_HEADER = "X-Gpuhive-Event"
IDEMPOTENCY_HEADER = "Idempotency-Key"
TOLERANCE = 300  # seconds a receiver should accept a timestamp for
URL_MAX = 2000
LOG_INTERVAL = 0.05  # seconds between writes of the delivery log
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


def masked(url: str) -> str:
    """An endpoint URL as shown after creation: scheme and host, the path's last 4 characters."""
    parts = urlsplit(url)
    rest = url[len(f"{parts.scheme}://{parts.netloc}") :]
    return f"{parts.scheme}://{parts.netloc}/…{rest[-4:]}" if len(rest) > 1 else url


@dataclass(frozen=True)
class WebhookSettings:
    """Delivery limits; `allowed_hosts` are shell-style patterns endpoint hosts must match."""

    timeout: float = 10.0
    max_attempts: int = 6
    backoff: float = 5.0
    backoff_cap: float = 900.0
    allowed_hosts: tuple[str, ...] = ("*",)
    allow_private: bool = False  # users' own endpoints may point at non-public addresses


async def public_only(url: str, timeout: float = 5.0) -> str | None:
    """Why a user's endpoint may not get this URL (a non-public address), or None.

    Users are legitimate but not trusted with the server's network position: their own
    endpoints must resolve only to global addresses (no loopback, private, link-local such as
    169.254.169.254, or reserved ones). Checked when the endpoint is added and before every
    attempt, so a name that later resolves elsewhere is caught too.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        async with asyncio.timeout(timeout):
            found = await asyncio.get_running_loop().getaddrinfo(
                host, parts.port or (443 if parts.scheme == "https" else 80)
            )
    except (OSError, TimeoutError, UnicodeError):
        return f"{host} cannot be resolved"
    for *_, address in found:
        ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
        if not ip.is_global:
            return f"{host} is a loopback, private or link-local address ({ip})"
    return None


def describe(webhook: Webhook, with_secret: bool = False) -> dict[str, Any]:
    """An endpoint as its owner or an admin sees it (the secret only when just made)."""
    shown: dict[str, Any] = {
        "id": webhook.id,
        "owner": webhook.owner,
        "site": webhook.site,
        "url": masked(webhook.url),
        "format": webhook.format,
        "events": list(webhook.events),
        "created_at": webhook.created_at.isoformat(),
    }
    if with_secret:
        shown["url"] = webhook.url
        shown["secret"] = webhook.secret
    return shown


def delivery_json(delivery: Delivery) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "event_id": delivery.event_id,
        "event": delivery.event,
        "state": delivery.state,
        "attempts": delivery.attempts,
        "created_at": delivery.created_at.isoformat(),
        "finished_at": delivery.finished_at.isoformat() if delivery.finished_at else None,
        "log": delivery.log,
    }


@dataclass
class _Item:
    webhook_id: int
    event_id: str
    event: str
    body: bytes
    attempts: int = 0
    queued_at: float = 0.0


class Webhooks:
    """Endpoints and their delivery workers (one per endpoint)."""

    def __init__(
        self,
        rows: Integrations,
        settings: WebhookSettings,
        run: Callable[..., Awaitable[Any]],
        clock: Callable[[], datetime],
    ) -> None:
        self.rows = rows
        self.settings = settings
        self.run = run
        self.now = clock
        self._endpoints: list[Webhook] | None = None
        self._queues: dict[int, asyncio.Queue[_Item]] = {}
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._ops: list[tuple[Any, ...]] = []
        self._writer: asyncio.Task[None] | None = None
        self.delays: deque[float] = deque(maxlen=10_000)  # event → delivered, s (benchmarks)

    # --- endpoints ----------------------------------------------------------------------

    def _check(self, who: Identity, body: dict[str, Any]) -> tuple[str, str, list[str], bool]:
        unknown = set(body) - {"url", "format", "events", "site"}
        if unknown:
            raise BadRequest(f"Unknown field(s): {', '.join(sorted(unknown))}.")
        url = body.get("url")
        if not isinstance(url, str):
            raise BadRequest("'url' must be a string such as 'https://hooks.example.org/x'.")
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > URL_MAX:
            raise Invalid("'url' must be an http:// or https:// URL with a host name.")
        if not any(fnmatch.fnmatch(parts.hostname, p) for p in self.settings.allowed_hosts):
            raise Invalid(f"This site does not send webhooks to {parts.hostname}.")
        fmt = body.get("format", "json")
        if fmt not in FORMATS:
            raise Invalid(f"'format' must be one of {', '.join(FORMATS)}.")
        events = body.get("events", ["*"])
        if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
            raise BadRequest("'events' must be a list of event names.")
        wanted = list(EVENTS) if "*" in events else events
        bad = sorted(set(wanted) - set(EVENTS))
        if bad or not wanted:
            raise Invalid(
                f"Unknown event(s) {', '.join(bad) or '(none)'}; known: {', '.join(EVENTS)}."
            )
        site = body.get("site", False)
        if not isinstance(site, bool):
            raise BadRequest("'site' must be true or false.")
        if site and not who.is_admin:
            raise Forbidden("Only gpuhive admins may add site webhooks (everyone's events).")
        return url.strip(), fmt, wanted, site

    async def add(self, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
        """Add an endpoint; the answer holds its secret and full URL, shown only this once."""
        url, fmt, events, site = self._check(who, body)
        problem = await self._guarded(site, url)
        if problem:
            raise Invalid(
                f"Your own webhooks must point at public addresses: {problem}. An admin can "
                "add it as a site webhook, or allow it with c.GpuHiveApp.webhook_allow_private."
            )
        secret = "whsec_" + secrets.token_urlsafe(32)
        made = await self.run(
            self.rows.add_webhook, who.name, site, url, secret, fmt, events, self.now()
        )
        self._endpoints = None
        return describe(made, with_secret=True)

    async def _guarded(self, site: bool, url: str) -> str | None:
        """Why `url` is refused to a personal (non-site) endpoint, or None."""
        if site or self.settings.allow_private:
            return None
        return await public_only(url, self.settings.timeout)

    async def endpoints(self) -> list[Webhook]:
        if self._endpoints is None:
            self._endpoints = await self.run(self.rows.webhooks)
        return self._endpoints

    async def listed(self, who: Identity) -> list[dict[str, Any]]:
        """The requester's endpoints (admins: all), URLs masked, no secrets."""
        return [describe(w) for w in await self.endpoints() if who.is_admin or w.owner == who.name]

    async def owned(self, who: Identity, webhook_id: int) -> Webhook:
        found = await self.run(self.rows.webhook, webhook_id)
        if found is None or not (who.is_admin or found.owner == who.name):
            raise NotFound(f"There is no webhook {webhook_id} of yours.")
        return found

    async def remove(self, who: Identity, webhook_id: int) -> None:
        await self.owned(who, webhook_id)
        await self.run(self.rows.delete_webhook, webhook_id)
        self._endpoints = None
        worker = self._workers.pop(webhook_id, None)
        self._queues.pop(webhook_id, None)
        if worker is not None:
            worker.cancel()

    async def log(self, who: Identity, webhook_id: int, limit: int) -> list[dict[str, Any]]:
        """The delivery log of one endpoint, newest first."""
        await self.owned(who, webhook_id)
        found = await self.run(self.rows.deliveries, webhook_id, None, limit)
        return [delivery_json(d) for d in found]

    # --- events -------------------------------------------------------------------------

    async def emit(self, event: str, data: dict[str, Any], users: Iterable[str], text: str) -> int:
        """Queue an event for every endpoint that wants it; the number of deliveries."""
        people = set(users)
        targets = [
            w for w in await self.endpoints() if event in w.events and (w.site or w.owner in people)
        ]
        if not targets:
            return 0
        event_id = str(uuid.uuid4())
        at = self.now()
        generic = {"id": event_id, "event": event, "at": at.isoformat(), "text": text, "data": data}
        bodies = {
            "json": json.dumps(generic).encode(),
            "slack": json.dumps({"text": f"gpuhive: {text}"}).encode(),
        }
        started = time.monotonic()
        for webhook in targets:
            body = bodies[webhook.format]
            self._log(("delivery", (webhook.id, event_id), event, body.decode(), at))
            item = _Item(webhook.id, event_id, event, body, queued_at=started)
            self._queue(webhook).put_nowait(item)
        return len(targets)

    # --- the delivery log: written in batches, off the delivery path ----------------------

    def _log(self, op: tuple[Any, ...]) -> None:
        self._ops.append(op)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_log())

    async def _write_log(self) -> None:
        """Write what accumulated in one transaction, every LOG_INTERVAL at most."""
        while self._ops:
            await asyncio.sleep(LOG_INTERVAL)
            ops, self._ops = self._ops, []
            try:
                await self.run(self.rows.write_log, ops)
            except Exception:
                log.exception("gpuhive: could not write %d webhook log entries", len(ops))

    async def flush(self) -> None:
        """Wait until the delivery log holds everything that happened so far."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer})

    def _queue(self, webhook: Webhook) -> asyncio.Queue[_Item]:
        queue = self._queues.get(webhook.id)
        if queue is None:
            queue = self._queues[webhook.id] = asyncio.Queue()
            self._workers[webhook.id] = asyncio.create_task(self._work(webhook, queue))
        return queue

    async def _work(self, webhook: Webhook, queue: asyncio.Queue[_Item]) -> None:
        """One endpoint's deliveries, at most PER_ENDPOINT at a time, each with a timeout."""
        client = AsyncHTTPClient(force_instance=True, max_clients=PER_ENDPOINT)
        slots = asyncio.Semaphore(PER_ENDPOINT)
        running: set[asyncio.Task[None]] = set()

        async def one(item: _Item) -> None:
            try:
                await self._attempt(client, webhook, queue, item)
            except Exception:  # never let one delivery stop the others
                log.exception("gpuhive: webhook %s event %s", webhook.id, item.event_id)
            finally:
                slots.release()

        try:
            while True:
                await slots.acquire()
                item = await queue.get()
                task = asyncio.create_task(one(item))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            client.close()

    async def _attempt(
        self,
        client: AsyncHTTPClient,
        webhook: Webhook,
        queue: asyncio.Queue[_Item],
        item: _Item,
    ) -> None:
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "jupyter-gpuhive webhooks",
            EVENT_HEADER: item.event,
            IDEMPOTENCY_HEADER: item.event_id,
            TIMESTAMP_HEADER: str(stamp),
            SIGNATURE_HEADER: sign(webhook.secret, stamp, item.body),
        }
        request = HTTPRequest(
            webhook.url,
            method="POST",
            body=item.body,
            headers=headers,
            connect_timeout=self.settings.timeout,
            request_timeout=self.settings.timeout,
            follow_redirects=False,
        )
        began = time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            problem = await self._guarded(webhook.site, webhook.url)
            if problem:
                raise ValueError(f"not sent: {problem}")
            reply = await client.fetch(request, raise_error=False)
            status = reply.code if reply.code != 599 else None
            if reply.code == 599:
                error = str(reply.error or "no answer")
            elif not 200 <= reply.code < 300:
                error = f"HTTP {reply.code}"
        except Exception as failure:  # DNS, refused, TLS: the attempt failed
            error = str(failure) or type(failure).__name__
        took = time.monotonic() - began
        item.attempts += 1
        if error is None:
            state = "delivered"
            self.delays.append(time.monotonic() - item.queued_at)
        elif item.attempts >= self.settings.max_attempts:
            state = "dead"
            log.warning("gpuhive: webhook %s gave up on %s: %s", webhook.id, item.event_id, error)
        else:
            state = "pending"
            self._retry(queue, item)
        key = (item.webhook_id, item.event_id)
        self._log(("attempt", key, self.now(), status, error, took * 1000, state))

    def _retry(self, queue: asyncio.Queue[_Item], item: _Item) -> None:
        """Requeue after backoff·2^(n-1), capped, with ±50 % jitter."""
        base = min(self.settings.backoff_cap, self.settings.backoff * 2 ** (item.attempts - 1))
        delay = base * random.uniform(0.5, 1.5)
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def put() -> None:
            self._timers.discard(handle)
            queue.put_nowait(item)

        handle = loop.call_later(delay, put)
        self._timers.add(handle)

    async def stop(self) -> None:
        """Cancel the workers and pending retries (undelivered rows stay 'pending')."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        workers = list(self._workers.values())
        self._workers.clear()
        self._queues.clear()
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await self.flush()
