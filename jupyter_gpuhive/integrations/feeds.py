"""Calendar feeds at secret URLs: a user's own reservations, or an admin's opt-in site feed.

A feed token is not a Jupyter token: it opens one feed (GET calendar/TOKEN.ics) and nothing
else. Only its SHA-256 is stored, so the URL is shown once, when it is made or rotated;
rotating deletes the old token (its URL answers 404).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..errors import Invalid, NotFound
from ..model import Identity
from ..model.authority import SITE_FEEDS, WRITE, require
from ..privacy import ANYONE, Privacy, shows_description
from ..store import Store
from ..store.feeds import FeedToken
from ..store.integrations import Integrations
from . import ical

PREFIX = "gpf_"
TOKEN_BYTES = 32
MAX_EVENTS = 10_000


@dataclass(frozen=True)
class FeedSettings:
    """How far feeds reach, and how long cancellations stay in them."""

    past: timedelta = timedelta(days=30)
    keep_cancelled: timedelta = timedelta(days=30)
    ahead: timedelta = timedelta(days=120)
    refresh_minutes: int = 15


def new_token() -> str:
    """A random feed token (URL-safe)."""
    return PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def looks_like_token(text: str) -> bool:
    """Cheap shape check before touching the store."""
    return text.startswith(PREFIX) and 20 < len(text) < 100


class Feeds:
    """Make, rotate and render feeds."""

    def __init__(
        self,
        store: Store,
        rows: Integrations,
        settings: FeedSettings,
        clock: Callable[[], datetime],
        privacy: Privacy | None = None,
    ) -> None:
        self.store = store
        self.rows = rows
        self.settings = settings
        self.privacy = privacy or Privacy()
        self.now = clock
        self._rendered: dict[tuple[int, int, bool], bytes] = {}

    # --- tokens -----------------------------------------------------------------------

    def status(self, who: Identity) -> dict[str, Any]:
        """The requester's personal feed (without its token) and, for admins, site feeds."""
        mine = self.rows.feeds("user", who.name)
        site = self.rows.feeds("site") if who.is_admin else []
        return {
            "personal": mine[0].to_json() if mine else None,
            "site": [f.to_json() for f in site],
        }

    def rotate(self, who: Identity) -> tuple[FeedToken, str]:
        """A new personal feed token for `who`; the old one stops working."""
        token = new_token()
        feed_id = self.rows.add_feed("user", who.name, None, token, self.now())
        return self._get(feed_id, "user"), token

    def stop(self, who: Identity) -> bool:
        """Turn the personal feed off; whether there was one."""
        return self.rows.delete_feed("user", owner=who.name) > 0

    def add_site(self, who: Identity, host: str | None) -> tuple[FeedToken, str]:
        """An admin publishes a site feed of all reservations, or of one host's."""
        require(who, SITE_FEEDS, WRITE)
        if host is not None and self.store.inventory.host(host) is None:
            raise Invalid(f"Unknown host '{host}'.")
        token = new_token()
        feed_id = self.rows.add_feed("site", who.name, host, token, self.now())
        return self._get(feed_id, "site"), token

    def remove_site(self, who: Identity, feed_id: int) -> None:
        require(who, SITE_FEEDS, WRITE)
        if not self.rows.delete_feed("site", feed_id=feed_id):
            raise NotFound(f"There is no site feed {feed_id}.")

    def _get(self, feed_id: int, kind: str) -> FeedToken:
        for feed in self.rows.feeds(kind):
            if feed.id == feed_id:
                return feed
        raise NotFound(f"There is no feed {feed_id}.")

    # --- rendering ----------------------------------------------------------------------

    def render(self, token: str) -> bytes:
        """The iCalendar text of the feed this token opens (404 for any other token)."""
        feed = self.rows.feed_by_token(token) if looks_like_token(token) else None
        if feed is None:
            raise NotFound("There is no such feed (the link may have been replaced).")
        now = self.now()
        s = self.settings
        gpu_ids = None
        if feed.kind == "site" and feed.host is not None:
            host = self.store.inventory.host(feed.host)
            gpu_ids = [g.id for g in host.gpus] if host is not None else []
        found = self.store.reservations.window(
            now - s.past,
            now + s.ahead,
            gpu_ids=gpu_ids,
            owner=feed.owner if feed.kind == "user" else None,
            include_cancelled=True,
            limit=MAX_EVENTS,
        )
        keep_after = now - s.keep_cancelled
        shown = [r for r in found if r.cancelled_at is None or r.cancelled_at >= keep_after]
        entries = self.rows.calendar(shown, ical.fingerprint, now)
        # A user's feed shows their own reservations; a site feed, anyone's, as ANYONE sees them.
        reader = Identity(feed.owner) if feed.kind == "user" else ANYONE
        described = all(shows_description(r.owner, reader, self.privacy) for r in shown)
        if feed.kind == "user":
            name = f"GPU reservations of {feed.owner}"
        else:
            name = f"GPU reservations on {feed.host}" if feed.host else "GPU reservations"
        return ical.calendar(
            name,
            ((r, entries[r.id]) for r in shown),
            described,
            s.refresh_minutes,
            self._rendered,
        )

    def touch(self, ids: list[int]) -> None:
        """Record edits (SEQUENCE grows even between two reads of a feed), as stored now."""
        found = []
        for rid in ids:
            try:
                found.append(self.store.reservations.get(rid))
            except NotFound:
                continue
        self.rows.calendar(found, ical.fingerprint, self.now(), edited=True)
