"""Idempotency keys' rows: who claimed a key for which request, and the answer it got.

A row's `status` tells its state: NULL while the first request runs and has changed
nothing, 0 once a write of that request committed (`applied`, in the same transaction as
the write itself, so a booking and its key never disagree), the HTTP status once its answer
is stored. The primary key (owner, key) decides a race between replicas: one INSERT wins.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, and_, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from .database import Database
from .schema import idempotency_keys

APPLIED = 0  # a write committed; the answer is not stored yet
Outcome = Literal["claimed", "replay", "mismatch", "busy", "lost"]


@dataclass(frozen=True)
class Claim:
    """What claiming a key found: the request runs ('claimed'), or how to answer instead."""

    outcome: Outcome
    status: int | None = None  # 'replay': the stored answer
    body: str | None = None
    location: str | None = None
    since: datetime | None = None  # when the key was first used


class IdempotencyKeys:
    """Rows of `idempotency_keys` (migration 0017)."""

    PURGE_EVERY = 60.0  # seconds between two purges of expired keys (per process)

    def __init__(self, db: Database) -> None:
        self.db = db
        self._purged = 0.0

    def claim(
        self,
        owner: str,
        key: str,
        fingerprint: str,
        now: datetime,
        ttl: timedelta,
        stale: timedelta,
    ) -> Claim:
        """Claim `key` for a request, or say how its earlier use was answered.

        A key older than `ttl` counts as new. A claim older than `stale` that changed nothing
        (its process ended before any write) is taken over; one that did change something
        but never stored its answer is 'lost'; younger ones are 'busy'."""
        t = idempotency_keys
        row = {"owner": owner, "key": key, "fingerprint": fingerprint, "created_at": now}
        fresh = {"fingerprint": fingerprint, "status": None, "body": None, "location": None}

        def made(conn: Connection) -> bool:
            insert_ = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            new = insert_(t).values(**row).on_conflict_do_nothing().returning(t.c.owner)
            return conn.execute(new).first() is not None  # (rowcount is not reliable here)

        def work(conn: Connection) -> Claim:
            if made(conn):
                return Claim("claimed")
            mine = and_(t.c.owner == owner, t.c.key == key)
            found = conn.execute(select(t).where(mine).with_for_update()).first()
            if found is None:  # purged between the two statements
                conn.execute(insert(t).values(**row))
                return Claim("claimed")
            since, status = found.created_at, found.status
            if since < now - ttl or (status is None and since < now - stale):
                conn.execute(update(t).where(mine).values(**fresh, created_at=now))
                return Claim("claimed")
            if found.fingerprint != fingerprint:
                return Claim("mismatch", since=since)
            if status is not None and status != APPLIED:
                return Claim("replay", status, found.body, found.location, since)
            lost = status == APPLIED and since < now - stale
            return Claim("lost" if lost else "busy", since=since)

        # A new key (nearly every request) is one statement: PostgreSQL runs it in autocommit.
        # A key in use takes the transaction that reads and decides on its row.
        claim = Claim("claimed") if self.db.write_one(made) else self.db.write(work)
        self._purge(now - ttl)
        return claim

    def applied(self, conn: Connection, owner: str, key: str) -> None:
        """Inside the request's own write transaction: the key's request changed something."""
        t = idempotency_keys
        conn.execute(
            update(t)
            .where(t.c.owner == owner, t.c.key == key, t.c.status.is_(None))
            .values(status=APPLIED)
        )

    def answer(self, owner: str, key: str, status: int, body: str, location: str | None) -> None:
        """Store the answer a retry with the same key gets."""
        t = idempotency_keys
        values: dict[str, Any] = {"status": status, "body": body, "location": location}
        self.db.write_one(
            lambda conn: conn.execute(
                update(t).where(t.c.owner == owner, t.c.key == key).values(**values)
            )
        )

    def release(self, owner: str, key: str) -> None:
        """Free a key whose request changed nothing (it failed or was dropped)."""
        t = idempotency_keys
        self.db.write_one(
            lambda conn: conn.execute(
                delete(t).where(t.c.owner == owner, t.c.key == key, t.c.status.is_(None))
            )
        )

    def get(self, owner: str, key: str) -> dict[str, Any] | None:
        """One key's row (tests, support)."""
        t = idempotency_keys
        with self.db.read() as conn:
            found = conn.execute(select(t).where(t.c.owner == owner, t.c.key == key)).first()
        return dict(found._mapping) if found else None

    def _purge(self, before: datetime) -> None:
        """Delete expired keys, at most once a minute per process (an indexed range)."""
        if time.monotonic() - self._purged < self.PURGE_EVERY:
            return
        self._purged = time.monotonic()
        t = idempotency_keys
        self.db.write_one(lambda conn: conn.execute(delete(t).where(t.c.created_at < before)))
