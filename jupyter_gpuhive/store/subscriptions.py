"""Rows of availability subscriptions and of daily digest settings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, or_, select, update

from ..model.errand import Errand
from .database import Database, inserted_id
from .schema import availability_subscriptions, digest_settings


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

    def add(self, values: dict[str, Any], errand: Errand | None = None) -> Subscription:
        """Store a new subscription (`errand`: the API request it is part of)."""
        row = {**values, "channels": json.dumps(list(values["channels"]))}
        row |= {"active": True, "fired": 0}
        new_id = self.db.write(
            lambda conn: inserted_id(
                conn.execute(insert(availability_subscriptions).values(**row))
            ),
            errand=errand,
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
