"""Approvals' rows (migration 0024): why a booking waits for approval, and the answer.

The tentative state itself is `reservations.tentative_until`, written with the booking (or
its edit) in the reservation's own transaction (store/reservations.py); these helpers write
the record beside it in that same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from .database import Database
from .schema import reservation_approvals, reservations

CHUNK = 5000


@dataclass(frozen=True)
class Decision:
    """An approval's answer: approved, declined or expired; by whom, when, and why (a
    decliner's reason)."""

    outcome: str
    by: str
    at: datetime
    note: str | None = None


def ask(conn: Connection, reservation_id: int, why: str, at: datetime) -> None:
    """Record that a booking waits for approval (again, after an edit: a fresh record)."""
    ra = reservation_approvals
    conn.execute(delete(ra).where(ra.c.reservation_id == reservation_id))
    conn.execute(insert(ra).values(reservation_id=reservation_id, why=why, asked_at=at))


def answer(conn: Connection, reservation_id: int, given: Decision) -> None:
    """Record the answer to a booking's approval."""
    ra = reservation_approvals
    conn.execute(
        update(ra)
        .where(ra.c.reservation_id == reservation_id)
        .values(outcome=given.outcome, decided_by=given.by, decided_at=given.at, note=given.note)
    )


class Approvals:
    """Reads of the approvals: what each booking's record says, and the holds that ran out."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def due(self, now: datetime) -> list[int]:
        """Tentative bookings whose hold ended by `now`, unanswered (by the partial index)."""
        r = reservations
        query = (
            select(r.c.id)
            .where(r.c.tentative_until.is_not(None), r.c.tentative_until <= now)
            .where(r.c.cancelled_at.is_(None))
            .order_by(r.c.tentative_until)
        )
        with self.db.read() as conn:
            return [int(rid) for rid in conn.execute(query).scalars()]

    def of(self, reservation_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Each booking's approval record (those that needed one): why, asked, the answer."""
        ra = reservation_approvals
        ids = sorted(set(reservation_ids))
        out: dict[int, dict[str, Any]] = {}
        with self.db.read() as conn:
            for i in range(0, len(ids), CHUNK):
                query = select(ra).where(ra.c.reservation_id.in_(ids[i : i + CHUNK]))
                for row in conn.execute(query).mappings():
                    out[row["reservation_id"]] = {
                        "why": row["why"],
                        "asked_at": row["asked_at"].isoformat(),
                        "outcome": row["outcome"],
                        "decided_by": row["decided_by"],
                        "decided_at": row["decided_at"].isoformat() if row["decided_at"] else None,
                        "note": row["note"],
                    }
        return out
