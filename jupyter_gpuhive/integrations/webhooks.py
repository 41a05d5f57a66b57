"""Webhooks: endpoints (who may add which, shown masked), events matched to them.

Delivery (signature, retries with backoff, the delivery log) is the courier's, in a process of
its own: see courier.py and delivery.py. The names receivers and other senders use are
re-exported here.
"""

from __future__ import annotations

import fnmatch
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..errors import Invalid, NotFound
from ..model import Identity
from ..model.authority import require
from ..model.requests import WebhookRequest
from ..store.integrations import Integrations
from ..store.webhooks import Delivery, Webhook
from .addresses import public_only
from .courier import Courier
from .delivery import (
    EVENT_HEADER,
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE,
    Event,
    WebhookSettings,
    guarded,
    sign,
    verify,
)
from .transport import Transports

log = logging.getLogger(__name__)

EVENTS = (
    "reservation.created",
    "reservation.changed",
    "reservation.cancelled",
    "reservation.starting",
    "reservation.ending",
    "reservation.tentative",
    "reservation.approved",
    "reservation.declined",
    "reservation.expired",
    "gpus.available",
    "job.started",
    "job.succeeded",
    "job.failed",
    "job.preempted",
    "violation",
    "gpu.health",
    "budget.warning",
)
FORMATS = ("json", "slack")
URL_MAX = 2000


def masked(url: str) -> str:
    """An endpoint URL as shown after creation: scheme and host, the path's last 4 characters."""
    parts = urlsplit(url)
    rest = url[len(f"{parts.scheme}://{parts.netloc}") :]
    return f"{parts.scheme}://{parts.netloc}/…{rest[-4:]}" if len(rest) > 1 else url


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


class Webhooks:
    """Endpoints, and the events matched to them (delivered by the courier process)."""

    def __init__(
        self,
        rows: Integrations,
        settings: WebhookSettings,
        run: Callable[..., Awaitable[Any]],
        clock: Callable[[], datetime],
        transports: Transports,
    ) -> None:
        self.rows = rows
        self.settings = settings
        self.run = run
        self.now = clock
        self._endpoints: list[Webhook] | None = None
        self._changes = 0  # bumped by every add and remove; a read begun before one is stale
        self.courier = Courier(rows.db.url, settings, transports)  # in its own process

    # --- endpoints ----------------------------------------------------------------------

    def _check(self, who: Identity, request: WebhookRequest) -> tuple[str, str, list[str], bool]:
        """The endpoint's URL, format, events and site flag, checked against the site."""
        url = request.url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > URL_MAX:
            raise Invalid("'url' must be an http:// or https:// URL with a host name.")
        if not any(fnmatch.fnmatch(parts.hostname, p) for p in self.settings.allowed_hosts):
            raise Invalid(f"This site does not send webhooks to {parts.hostname}.")
        fmt, events, site = request.format, request.events, request.site
        if fmt not in FORMATS:
            raise Invalid(f"'format' must be one of {', '.join(FORMATS)}.")
        wanted = list(EVENTS) if "*" in events else list(events)
        bad = sorted(set(wanted) - set(EVENTS))
        if bad or not wanted:
            raise Invalid(
                f"Unknown event(s) {', '.join(bad) or '(none)'}; known: {', '.join(EVENTS)}."
            )
        if site:
            require(who, "gpuhive:webhooks", "site")
        return url, fmt, wanted, site

    async def add(self, who: Identity, request: WebhookRequest) -> dict[str, Any]:
        """Add an endpoint; the answer holds its secret and full URL, shown only this once."""
        url, fmt, events, site = self._check(who, request)
        problem = await guarded(self.settings, site, url)
        if problem:
            raise Invalid(
                f"Your own webhooks must point at public addresses: {problem}. An admin can "
                "add it as a site webhook, or allow it with c.GpuHiveApp.webhook_allow_private."
            )
        secret = "whsec_" + secrets.token_urlsafe(32)
        made = await self.run(
            self.rows.add_webhook, who.name, site, url, secret, fmt, events, self.now()
        )
        self._changed()
        await self.courier.ready()  # warm before the first event
        return describe(made, with_secret=True)

    def _changed(self) -> None:
        self._changes += 1
        self._endpoints = None

    async def endpoints(self) -> list[Webhook]:
        """Every endpoint, cached until one is added or removed.

        A read that an add or remove overtook is done again: kept, it would hide the new
        endpoint from every later event (seen under load, when reading is slow).
        """
        cached = self._endpoints
        if cached is not None:
            return cached
        began = self._changes
        found: list[Webhook] = await self.run(self.rows.webhooks)
        if began == self._changes:
            self._endpoints = found
            return found
        return await self.endpoints()

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
        self._changed()
        self.courier.forget(webhook_id)

    async def log(self, who: Identity, webhook_id: int, limit: int) -> list[dict[str, Any]]:
        """The delivery log of one endpoint, newest first."""
        await self.owned(who, webhook_id)
        found = await self.run(self.rows.deliveries, webhook_id, None, limit)
        return [delivery_json(d) for d in found]

    # --- events -------------------------------------------------------------------------

    async def emit(
        self,
        event: str,
        data: dict[str, Any],
        users: Iterable[str],
        text: str,
        public: dict[str, Any] | None = None,
    ) -> int:
        """Hand an event to the courier for every endpoint that wants it; how many.

        The endpoints of `users` (the people it is about) get `data`; site endpoints, which
        anyone may read, get `public` (privacy.ANYONE's view), or nothing when it is None.
        """
        people = set(users)
        wanted = [w for w in await self.endpoints() if event in w.events]
        own = tuple(w for w in wanted if not w.site and w.owner in people)
        site = tuple(w for w in wanted if w.site) if public is not None else ()
        if not own and not site:
            return 0
        if not await self.courier.ready():
            log.warning("gpuhive: webhooks are stopped; %s not sent", event)
            return 0
        sent, event_id, at = 0, str(uuid.uuid4()), self.now()  # one event: one id, two views
        for targets, body in ((own, data), (site, public)):
            if targets and body is not None:
                view = Event(event_id, event, at, text, body, targets)
                sent += len(targets) if self.courier.send(view) else 0
        return sent

    async def flush(self) -> None:
        """Wait until the delivery log holds everything that happened so far."""
        await self.courier.flush()

    async def stop(self) -> None:
        """Cancel the deliveries and pending retries (undelivered rows stay 'pending')."""
        await self.courier.stop()


__all__ = [
    "EVENTS",
    "EVENT_HEADER",
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "TOLERANCE",
    "WebhookSettings",
    "Webhooks",
    "describe",
    "public_only",
    "sign",
    "verify",
]
