"""Rows of the integrations: feed tokens, calendar UIDs/SEQUENCEs, webhooks, deliveries."""

from __future__ import annotations

from .feeds import FeedRows
from .webhooks import WebhookRows


class Integrations(FeedRows, WebhookRows):
    """The feeds' and webhooks' rows over one database; every write is one transaction."""
