"""Webhook handler: a JSON POST (Slack-compatible payload), signed like gpuhive's webhooks
(docs/integrations.md) when it has a `secret`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

from .base import (
    HandlerConfigError,
    HandlerFailed,
    Incident,
    Options,
    ViolationHandler,
)

log = logging.getLogger(__name__)


class WebhookHandler(ViolationHandler):
    """POSTs JSON to a URL; the payload's 'text' makes it a Slack-compatible message."""

    default_interval = 300.0
    default_timeout = 10.0

    def configure(self, opts: Options) -> None:
        url = opts.text("url", required=True) or ""
        if not url.startswith(("http://", "https://")):
            raise HandlerConfigError(
                f"violation handler '{self.name}': 'url' must start with http:// or https://."
            )
        self.url = url
        self.headers = opts.mapping("headers")
        self.payload = opts.choice("payload", "full", ("full", "text"))
        self.secret = opts.text("secret")

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        body: dict[str, Any] = {"text": f"gpuhive: {self.text(incident, step)}"}
        if self.payload == "full":
            body["violation"] = incident.to_json()
        data = json.dumps(body).encode()
        try:
            status = await asyncio.to_thread(self._post, data)
        except (OSError, urllib.error.URLError) as error:
            raise HandlerFailed(f"POST {self.url}: {error}") from None
        return f"POST {self.url}: {status}"

    def _post(self, data: bytes) -> int:
        headers = {"Content-Type": "application/json", **self.headers}
        if self.secret:  # the same scheme as the API's webhooks, so receivers share one check
            from ...integrations import webhooks as signed

            stamp = int(time.time())
            headers[signed.EVENT_HEADER] = "violation"
            headers[signed.IDEMPOTENCY_HEADER] = str(uuid.uuid4())
            headers[signed.TIMESTAMP_HEADER] = str(stamp)
            headers[signed.SIGNATURE_HEADER] = signed.sign(self.secret, stamp, data)
        request = urllib.request.Request(self.url, data, headers, method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=self.timeout) as reply:  # noqa: S310
            return int(reply.status)
