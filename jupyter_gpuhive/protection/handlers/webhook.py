"""Webhook handler: a JSON POST (Slack-compatible payload), signed like gpuhive's webhooks
(docs/integrations.md) when it has a `secret`.

It posts through the courier's seam (integrations/delivery.py `Sender`, over the transport in
its context: the Hive's): the same headers and
signature, the pinned resolver, and retries with the courier's backoff (`attempts`,
`backoff`) within the handler's deadline. Its URL is set by the admin in the server's
configuration, so it is a site destination (`site=True`): it may point anywhere, like a site
webhook. Its attempts are recorded with the action in the violation's history.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from ...integrations.delivery import Sender, WebhookSettings
from .base import (
    HandlerConfigError,
    HandlerFailed,
    Incident,
    Options,
    ViolationHandler,
)

log = logging.getLogger(__name__)

SITE = True  # the URL comes from the admin's configuration: no public-address guard


class WebhookHandler(ViolationHandler):
    """POSTs JSON to a URL; the payload's 'text' makes it a Slack-compatible message."""

    default_interval = 300.0
    default_timeout = 10.0

    def configure(self, opts: Options) -> None:
        if self.context.http is None:
            raise HandlerConfigError(
                f"violation handler '{self.name}': no HTTP transport to post with (the Hive "
                "hands one to the protection service)."
            )
        self.http = self.context.http
        url = opts.text("url", required=True) or ""
        if not url.startswith(("http://", "https://")):
            raise HandlerConfigError(
                f"violation handler '{self.name}': 'url' must start with http:// or https://."
            )
        self.url = url
        self.headers = opts.mapping("headers")
        self.payload = opts.choice("payload", "full", ("full", "text"))
        self.secret = opts.text("secret")
        self.settings = WebhookSettings(
            timeout=self.timeout,
            max_attempts=int(opts.number("attempts", 3, minimum=1)),
            backoff=opts.number("backoff", 1.0),
            backoff_cap=60.0,
        )

    def deadline(self, step: Mapping[str, Any]) -> float:
        """Every attempt's timeout and the longest backoff between them."""
        s = self.settings
        waits = sum(min(s.backoff_cap, s.backoff * 2**n) * 1.5 for n in range(s.max_attempts - 1))
        return s.max_attempts * s.timeout + waits + 1.0

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        body: dict[str, Any] = {"text": f"gpuhive: {self.text(incident, step)}"}
        if self.payload == "full":
            body["violation"] = incident.to_json()
        data = json.dumps(body).encode()
        sender = Sender(self.settings, self.http, site=SITE)
        try:
            attempts = await sender.deliver(
                self.url, data, event="violation", event_id=str(uuid.uuid4()),
                secret=self.secret, headers=self.headers,
            )  # fmt: skip
        finally:
            sender.close()
        *before, last = attempts
        earlier = "; ".join(f"{n}: {a.error}" for n, a in enumerate(before, 1))
        if last.error is not None:
            tries = f" (after {len(attempts)} attempts; {earlier})" if before else ""
            raise HandlerFailed(f"POST {self.url}: {last.error}{tries}")
        done = f"POST {self.url}: {last.status}"
        return f"{done} (attempt {len(attempts)}; {earlier})" if before else done
