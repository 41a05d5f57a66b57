"""Rows of the integrations: feed tokens, calendar UIDs/SEQUENCEs, webhooks, deliveries."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, delete, insert, or_, select, update

from ..model import Reservation
from .database import Database
from .schema import (
    availability_subscriptions,
    calendar_events,
    digest_settings,
    feed_tokens,
    webhook_attempts,
    webhook_deliveries,
    webhooks,
)
from .users import insert_ignoring_duplicates


def _new_id(result: Any) -> int:
    """The id an INSERT made."""
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def token_hash(token: str) -> str:
    """What the store keeps of a feed token (never the token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class FeedToken:
    """A secret calendar feed: a user's own, or a site feed (all hosts or one)."""

    id: int
    kind: str
    owner: str
    host: str | None
    hint: str
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "owner": self.owner,
            "host": self.host,
            "token_hint": "…" + self.hint,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True)
class CalendarEntry:
    """A reservation's calendar identity: UID, SEQUENCE and when it last changed."""

    uid: str
    sequence: int
    changed_at: datetime


@dataclass(frozen=True)
class Webhook:
    """A webhook endpoint; `site` ones (admins') get everyone's events."""

    id: int
    owner: str
    site: bool
    url: str
    secret: str
    format: str
    events: tuple[str, ...]
    created_at: datetime


@dataclass
class Delivery:
    """One event for one endpoint, with its attempts (the delivery log)."""

    id: int
    webhook_id: int
    event_id: str
    event: str
    body: str
    state: str
    attempts: int
    created_at: datetime
    finished_at: datetime | None
    log: list[dict[str, Any]] = field(default_factory=list)


_FEED_COLUMNS = (
    feed_tokens.c.id,
    feed_tokens.c.kind,
    feed_tokens.c.owner,
    feed_tokens.c.host,
    feed_tokens.c.hint,
    feed_tokens.c.created_at,
)


class Integrations:
    """The integrations' rows; every write is one transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- feed tokens ------------------------------------------------------------------

    def add_feed(self, kind: str, owner: str, host: str | None, token: str, now: datetime) -> int:
        """Store a feed token's hash; a user's new personal token replaces the old one."""

        def work(conn: Connection) -> int:
            if kind == "user":
                conn.execute(
                    delete(feed_tokens).where(
                        feed_tokens.c.kind == "user", feed_tokens.c.owner == owner
                    )
                )
            row = {"kind": kind, "owner": owner, "host": host, "created_at": now}
            row |= {"token_hash": token_hash(token), "hint": token[-4:]}
            return _new_id(conn.execute(insert(feed_tokens).values(**row)))

        return self.db.write(work)

    def feed_by_token(self, token: str) -> FeedToken | None:
        """The feed a token opens, or None."""
        with self.db.read() as conn:
            row = conn.execute(
                select(*_FEED_COLUMNS).where(feed_tokens.c.token_hash == token_hash(token))
            ).first()
        return FeedToken(*row) if row else None

    def feeds(self, kind: str, owner: str | None = None) -> list[FeedToken]:
        """Feeds of one kind (of one owner)."""
        query = select(*_FEED_COLUMNS).where(feed_tokens.c.kind == kind)
        if owner is not None:
            query = query.where(feed_tokens.c.owner == owner)
        with self.db.read() as conn:
            return [FeedToken(*row) for row in conn.execute(query.order_by(feed_tokens.c.id))]

    def delete_feed(self, kind: str, feed_id: int | None = None, owner: str | None = None) -> int:
        """Delete feeds by id or by owner; the number deleted."""
        query = delete(feed_tokens).where(feed_tokens.c.kind == kind)
        if feed_id is not None:
            query = query.where(feed_tokens.c.id == feed_id)
        if owner is not None:
            query = query.where(feed_tokens.c.owner == owner)
        return self.db.write(lambda conn: int(conn.execute(query).rowcount or 0))

    # --- calendar identities ------------------------------------------------------------

    def calendar(
        self,
        found: Sequence[Reservation],
        fingerprint: Callable[[Reservation], str],
        now: datetime,
    ) -> dict[int, CalendarEntry]:
        """UID and SEQUENCE of each reservation; a new fingerprint bumps SEQUENCE."""
        wanted = {r.id: fingerprint(r) for r in found}
        known = self._entries(list(wanted))
        stale = [
            rid
            for rid, print_ in wanted.items()
            if known.get(
                rid,
                (
                    None,
                    "",
                ),
            )[1]
            != print_
        ]
        if not stale:
            return {rid: entry for rid, (entry, _) in known.items()}

        def work(conn: Connection) -> None:
            current = self._entries(stale, conn)
            c = calendar_events.c
            new = [
                {"reservation_id": rid, "uid": str(uuid.uuid4()), "sequence": 0,
                 "fingerprint": wanted[rid], "changed_at": now}
                for rid in stale
                if rid not in current
            ]  # fmt: skip
            bumped = [
                {"rid": rid, "seq": current[rid][0].sequence + 1, "print": wanted[rid]}
                for rid in stale
                if rid in current and current[rid][1] != wanted[rid]
            ]
            if new:  # another render may insert the same rows meanwhile (PostgreSQL)
                conn.execute(insert_ignoring_duplicates(conn)(calendar_events), new)
            if bumped:
                conn.execute(
                    update(calendar_events)
                    .where(c.reservation_id == bindparam("rid"))
                    .values(sequence=bindparam("seq"), fingerprint=bindparam("print"),
                            changed_at=now),
                    bumped,
                )  # fmt: skip

        self.db.write(work)
        return {rid: entry for rid, (entry, _) in self._entries(list(wanted)).items()}

    def _entries(
        self, ids: list[int], conn: Connection | None = None
    ) -> dict[int, tuple[CalendarEntry, str]]:
        if conn is None:
            with self.db.read() as reader:
                return self._entries(ids, reader)
        out: dict[int, tuple[CalendarEntry, str]] = {}
        c = calendar_events.c
        for i in range(0, len(ids), 5000):
            query = select(c.reservation_id, c.uid, c.sequence, c.changed_at, c.fingerprint)
            for rid, uid, seq, changed, print_ in conn.execute(
                query.where(c.reservation_id.in_(ids[i : i + 5000]))
            ):
                out[rid] = (CalendarEntry(uid, seq, changed), print_)
        return out

    # --- webhooks -----------------------------------------------------------------------

    def add_webhook(
        self,
        owner: str,
        site: bool,
        url: str,
        secret: str,
        format: str,
        events: Iterable[str],
        now: datetime,
    ) -> Webhook:
        """Store an endpoint."""
        row = {"owner": owner, "site": site, "url": url, "secret": secret, "format": format}
        row |= {"events": json.dumps(sorted(events)), "created_at": now}
        new_id = self.db.write(lambda conn: _new_id(conn.execute(insert(webhooks).values(**row))))
        found = self.webhook(new_id)
        assert found is not None
        return found

    def webhooks(self) -> list[Webhook]:
        """Every endpoint, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(select(webhooks).order_by(webhooks.c.id)).all()
        return [_webhook(row) for row in rows]

    def webhook(self, webhook_id: int) -> Webhook | None:
        with self.db.read() as conn:
            row = conn.execute(select(webhooks).where(webhooks.c.id == webhook_id)).first()
        return _webhook(row) if row else None

    def delete_webhook(self, webhook_id: int) -> None:
        self.db.write(
            lambda conn: conn.execute(delete(webhooks).where(webhooks.c.id == webhook_id))
        )

    def write_log(self, ops: Sequence[tuple[Any, ...]]) -> None:
        """Deliveries and attempts, in order, in one transaction (a few statements per batch).

        ('delivery', (webhook_id, event_id), event, body, at) queues one;
        ('attempt', (webhook_id, event_id), at, status, error, ms, state) logs one attempt
        and moves its delivery to `state` (pending, delivered, dead). Endpoints deleted
        meanwhile are skipped.
        """
        d = webhook_deliveries.c

        def work(conn: Connection) -> None:
            existing = set(conn.execute(select(webhooks.c.id)).scalars())
            live = [op for op in ops if op[1][0] in existing]
            queued = [
                {"webhook_id": key[0], "event_id": key[1], "event": event, "body": body,
                 "state": "pending", "attempts": 0, "created_at": at}
                for kind, key, event, body, at in (op for op in live if op[0] == "delivery")
            ]  # fmt: skip
            if queued:
                conn.execute(insert(webhook_deliveries), queued)
            tried = [op for op in live if op[0] == "attempt"]
            if not tried:
                return
            ids = self._delivery_ids(conn, {op[1] for op in tried})
            attempts: list[dict[str, Any]] = []
            moved: dict[tuple[int, str], dict[str, Any]] = {}
            for _, key, at, status, error, ms, state in tried:
                if key not in ids:
                    continue
                attempts.append({"delivery_id": ids[key], "at": at, "status": status,
                                 "error": error, "ms": ms})  # fmt: skip
                count = moved.get(key, {}).get("n", 0) + 1
                finished = at if state != "pending" else None
                moved[key] = {"i": ids[key], "n": count, "s": state, "f": finished}
            if attempts:
                conn.execute(insert(webhook_attempts), attempts)
                conn.execute(
                    update(webhook_deliveries)
                    .where(d.id == bindparam("i"))
                    .values(
                        attempts=d.attempts + bindparam("n", type_=Integer),
                        state=bindparam("s", type_=d.state.type),
                        finished_at=bindparam("f", type_=d.finished_at.type),
                    ),
                    list(moved.values()),
                )

        if ops:
            self.db.write(work)

    @staticmethod
    def _delivery_ids(conn: Connection, keys: set[tuple[int, str]]) -> dict[tuple[int, str], int]:
        """The row ids of deliveries by (webhook_id, event_id)."""
        d = webhook_deliveries.c
        found: dict[tuple[int, str], int] = {}
        events = sorted({key[1] for key in keys})
        for i in range(0, len(events), 500):
            rows = conn.execute(
                select(d.id, d.webhook_id, d.event_id).where(d.event_id.in_(events[i : i + 500]))
            )
            found |= {(w, e): rid for rid, w, e in rows if (w, e) in keys}
        return found

    def deliveries(
        self, webhook_id: int | None = None, state: str | None = None, limit: int = 100
    ) -> list[Delivery]:
        """Newest deliveries first, each with its attempts."""
        d = webhook_deliveries.c
        query = select(webhook_deliveries)
        if webhook_id is not None:
            query = query.where(d.webhook_id == webhook_id)
        if state is not None:
            query = query.where(d.state == state)
        with self.db.read() as conn:
            found = [
                Delivery(*row) for row in conn.execute(query.order_by(d.id.desc()).limit(limit))
            ]
            by_id = {x.id: x for x in found}
            a = webhook_attempts.c
            if by_id:
                rows = conn.execute(
                    select(a.delivery_id, a.at, a.status, a.error, a.ms)
                    .where(a.delivery_id.in_(list(by_id)))
                    .order_by(a.id)
                )
                for delivery_id, at, status, error, ms in rows:
                    by_id[delivery_id].log.append(
                        {"at": at.isoformat(), "status": status, "error": error, "ms": round(ms, 1)}
                    )
        return found


def _webhook(row: Any) -> Webhook:
    events = tuple(json.loads(row.events))
    return Webhook(
        row.id, row.owner, row.site, row.url, row.secret, row.format, events, row.created_at
    )


@dataclass(frozen=True)
class Subscription:
    """A standing request to be told when matching GPUs are free."""

    id: int
    owner: str
    gpu_count: int
    host: str | None
    model: str | None
    seconds: int
    deadline: datetime
    channels: tuple[str, ...]
    email: str | None
    repeat: bool
    active: bool
    created_at: datetime
    fired_at: datetime | None
    fired: int
    offer: dict[str, Any] | None
    starts_now: bool = False  # no deadline given: only GPUs free when checked; deadline = watch end


def _subscription(row: Any) -> Subscription:
    values = dict(row._mapping)
    values["channels"] = tuple(json.loads(values["channels"]))
    values["offer"] = json.loads(values["offer"]) if values["offer"] else None
    return Subscription(**values)


class Subscriptions:
    """Availability subscriptions' rows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, values: dict[str, Any]) -> Subscription:
        row = {**values, "channels": json.dumps(list(values["channels"]))}
        row |= {"active": True, "fired": 0}
        new_id = self.db.write(
            lambda conn: _new_id(conn.execute(insert(availability_subscriptions).values(**row)))
        )
        found = self.get(new_id)
        assert found is not None
        return found

    def get(self, sub_id: int) -> Subscription | None:
        s = availability_subscriptions
        with self.db.read() as conn:
            row = conn.execute(select(s).where(s.c.id == sub_id)).first()
        return _subscription(row) if row else None

    def all(self, owner: str | None = None, active: bool | None = None) -> list[Subscription]:
        s = availability_subscriptions
        query = select(s).order_by(s.c.id)
        if owner is not None:
            query = query.where(s.c.owner == owner)
        if active is not None:
            query = query.where(s.c.active == active)
        with self.db.read() as conn:
            return [_subscription(row) for row in conn.execute(query)]

    def delete(self, sub_id: int) -> None:
        s = availability_subscriptions
        self.db.write(lambda conn: conn.execute(delete(s).where(s.c.id == sub_id)))

    def fired(self, sub_id: int, offer: dict[str, Any], at: datetime, keep: bool) -> bool:
        """Record a firing (once: False when another server fired it first)."""
        s = availability_subscriptions

        def work(conn: Connection) -> bool:
            done = conn.execute(
                update(s)
                .where(s.c.id == sub_id, s.c.active.is_(True))
                .values(offer=json.dumps(offer), fired_at=at, fired=s.c.fired + 1, active=keep)
            )
            return bool(done.rowcount)

        return self.db.write(work)

    def expire(self, now: datetime) -> int:
        """End subscriptions whose deadline passed."""
        s = availability_subscriptions
        return self.db.write(
            lambda conn: int(
                conn.execute(
                    update(s).where(s.c.active.is_(True), s.c.deadline <= now).values(active=False)
                ).rowcount
                or 0
            )
        )


@dataclass(frozen=True)
class DigestSetting:
    """A user's daily digest: on or off, where to, and the local day it was last sent."""

    owner: str
    enabled: bool
    email: str | None
    last_sent: date | None


class Digests:
    """Daily digest settings' rows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, owner: str) -> DigestSetting | None:
        d = digest_settings
        with self.db.read() as conn:
            row = conn.execute(select(d).where(d.c.owner == owner)).first()
        return DigestSetting(*row) if row else None

    def set(self, owner: str, enabled: bool, email: str | None) -> DigestSetting:
        d = digest_settings

        def work(conn: Connection) -> None:
            done = conn.execute(
                update(d).where(d.c.owner == owner).values(enabled=enabled, email=email)
            )
            if not done.rowcount:
                conn.execute(insert(d).values(owner=owner, enabled=enabled, email=email))

        self.db.write(work)
        found = self.get(owner)
        assert found is not None
        return found

    def due(self, day: date) -> list[DigestSetting]:
        """Enabled digests not yet sent for `day`."""
        d = digest_settings
        query = select(d).where(
            d.c.enabled.is_(True), or_(d.c.last_sent.is_(None), d.c.last_sent < day)
        )
        with self.db.read() as conn:
            return [DigestSetting(*row) for row in conn.execute(query.order_by(d.c.owner))]

    def sent(self, owner: str, day: date) -> None:
        d = digest_settings
        self.db.write(
            lambda conn: conn.execute(update(d).where(d.c.owner == owner).values(last_sent=day))
        )
