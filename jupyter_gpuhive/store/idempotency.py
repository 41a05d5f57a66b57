"""Idempotency keys' rows: which request used a key, and the answer it got.

A key is taken by the first statement of its request's first write transaction (`take`),
so the key and what the request wrote commit together or not at all, and the request needs
no transaction of its own for it. A row's `status` tells its state: 0 once that write
committed and the answer is not stored yet (`APPLIED`), then the HTTP status of the stored
answer. A request that changed nothing stores its answer (a refusal, say) afterwards, where
no retry took the key meanwhile (`refusal`). NULL is a claim of the earlier scheme, made
before the request ran (rows of a process from before it). The primary key (owner, key)
decides a race between replicas: one INSERT wins, the other waits for its transaction
(PostgreSQL) or its turn (SQLite) and then finds the row.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..model.errand import Claim, KeyAnswered, KeyTerms
from .database import Database
from .schema import idempotency_keys

__all__ = ["APPLIED", "Claim", "IdempotencyKeys", "KeyAnswered", "KeyTerms"]

APPLIED = 0  # a write committed; the answer is not stored yet


def _judge(found: Any, terms: KeyTerms, now: datetime) -> Claim | None:
    """What a key's row says to a new use of it; None where it may be taken over (expired,
    or an earlier-scheme claim that is stale and wrote nothing)."""
    since, status = found.created_at, found.status
    if since < now - terms.ttl or (status is None and since < now - terms.stale):
        return None
    if found.fingerprint != terms.fingerprint:
        return Claim("mismatch", since=since)
    if status is not None and status != APPLIED:
        return Claim("replay", status, found.body, found.location, since)
    lost = status == APPLIED and since < now - terms.stale
    return Claim("lost" if lost else "busy", since=since)


def _insert(conn: Connection) -> Any:
    return postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert


class IdempotencyKeys:
    """Rows of `idempotency_keys` (migration 0017)."""

    PURGE_EVERY = 60.0  # seconds between two purges of expired keys (per process)

    def __init__(self, db: Database) -> None:
        self.db = db
        self._purged = 0.0

    def take(self, conn: Connection, terms: KeyTerms, now: datetime) -> Claim:
        """Inside a request's first write transaction, before its work: take the key for it
        (marked APPLIED: it commits with the write), or say how its earlier use was answered.

        A key older than `ttl` counts as new; so does an earlier-scheme claim older than
        `stale` whose request wrote nothing. One that did write but never stored its answer
        is 'lost' once stale; younger ones are 'busy'."""
        t = idempotency_keys
        row = {
            "owner": terms.owner,
            "key": terms.key,
            "fingerprint": terms.fingerprint,
            "created_at": now,
            "status": APPLIED,
        }
        made = _insert(conn)(t).values(**row).on_conflict_do_nothing().returning(t.c.owner)
        if conn.execute(made).first() is not None:  # (rowcount is not reliable here)
            return Claim("claimed")
        mine = and_(t.c.owner == terms.owner, t.c.key == terms.key)
        found = conn.execute(select(t).where(mine).with_for_update()).first()
        if found is None:  # purged between the two statements
            conn.execute(_insert(conn)(t).values(**row))
            return Claim("claimed")
        judged = _judge(found, terms, now)
        if judged is None:  # expired, or an abandoned claim of the earlier scheme
            conn.execute(update(t).where(mine).values(**row, body=None, location=None))
            return Claim("claimed")
        return judged

    def peek(self, terms: KeyTerms, now: datetime) -> Claim | None:
        """How the key's earlier use was answered, read before a request that reaches hosts
        starts (its checks on hosts would run again for a retry); None: it may be taken."""
        t = idempotency_keys
        with self.db.read() as conn:
            found = conn.execute(
                select(t).where(t.c.owner == terms.owner, t.c.key == terms.key)
            ).first()
        return None if found is None else _judge(found, terms, now)

    def claim(self, terms: KeyTerms, now: datetime) -> Claim:
        """`take` in a transaction of its own (support and tests; requests take their key
        in their own first write)."""
        claim = self.db.write(lambda conn: self.take(conn, terms, now))
        self.purge(now - terms.ttl)
        return claim

    def answer(
        self,
        owner: str,
        key: str,
        status: int,
        body: str,
        location: str | None,
        expired: datetime | None = None,
    ) -> None:
        """Store the answer of a request whose write took the key (and, given `expired`,
        purge the keys made before it: `purge`)."""
        t = idempotency_keys
        values: dict[str, Any] = {"status": status, "body": body, "location": location}
        self.db.write_one(
            lambda conn: conn.execute(
                update(t).where(t.c.owner == owner, t.c.key == key).values(**values)
            )
        )
        if expired is not None:
            self.purge(expired)

    def refusal(
        self, terms: KeyTerms, now: datetime, status: int, body: str, location: str | None
    ) -> None:
        """Store the answer of a request that changed nothing (a refusal): a retry gets it
        again. Where the key was taken meanwhile (a retry that did write), that stands."""
        t = idempotency_keys
        row = {
            "owner": terms.owner,
            "key": terms.key,
            "fingerprint": terms.fingerprint,
            "created_at": now,
            "status": status,
            "body": body,
            "location": location,
        }
        self.db.write_one(
            lambda conn: conn.execute(_insert(conn)(t).values(**row).on_conflict_do_nothing())
        )
        self.purge(now - terms.ttl)

    def get(self, owner: str, key: str) -> dict[str, Any] | None:
        """One key's row (tests, support)."""
        t = idempotency_keys
        with self.db.read() as conn:
            found = conn.execute(select(t).where(t.c.owner == owner, t.c.key == key)).first()
        return dict(found._mapping) if found else None

    def purge(self, before: datetime) -> None:
        """Delete keys made before `before`, at most once a minute per process (an indexed
        range)."""
        if time.monotonic() - self._purged < self.PURGE_EVERY:
            return
        self._purged = time.monotonic()
        t = idempotency_keys
        self.db.write_one(lambda conn: conn.execute(delete(t).where(t.c.created_at < before)))
