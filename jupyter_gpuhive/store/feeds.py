"""Calendar feed rows: feed tokens (kept hashed) and each reservation's UID and SEQUENCE."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from ..model import Reservation
from .database import Database, inserted_id
from .schema import calendar_events, feed_tokens
from .users import insert_ignoring_duplicates


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


_FEED_COLUMNS = (
    feed_tokens.c.id,
    feed_tokens.c.kind,
    feed_tokens.c.owner,
    feed_tokens.c.host,
    feed_tokens.c.hint,
    feed_tokens.c.created_at,
)


class FeedRows:
    """Feed tokens and calendar identities; every write is one transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

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
            return inserted_id(conn.execute(insert(feed_tokens).values(**row)))

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
        edited: bool = False,
    ) -> dict[int, CalendarEntry]:
        """UID and SEQUENCE of each reservation; a new fingerprint bumps SEQUENCE. Entries
        made now start at SEQUENCE 0, or 1 when `edited` (edits of a reservation no feed
        showed yet: a booking is not recorded until it is shown or edited)."""
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
                {"reservation_id": rid, "uid": str(uuid.uuid4()), "sequence": int(edited),
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
