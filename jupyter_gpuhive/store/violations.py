"""Violation history: every violation (and idle-GPU notice) with the actions taken on it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    insert,
    or_,
    select,
    update,
)

from .database import Database
from .schema import UTCDateTime, metadata

violations = Table(
    "violations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("host", String(128), nullable=False),
    Column("gpu", String(255), nullable=False),
    Column("gpu_uuid", String(96), nullable=False),
    Column("offender", String(128)),
    Column("holder", String(128)),
    Column("reservation_id", Integer, ForeignKey("reservations.id", ondelete="SET NULL")),
    Column("level", Integer, nullable=False),
    Column("pids", Text, nullable=False),
    Column("commands", Text, nullable=False),
    Column("detail", Text),
    Column("started_at", UTCDateTime, nullable=False),
    Column("last_seen_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime),
    Index(None, "started_at"),
    Index(None, "reservation_id"),
    Index(None, "offender", "started_at"),
    sqlite_autoincrement=True,  # ids are never reused (migration 0006)
)

violation_actions = Table(
    "violation_actions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "violation_id", Integer, ForeignKey("violations.id", ondelete="CASCADE"), nullable=False
    ),
    Column("at", UTCDateTime, nullable=False),
    Column("step", Integer),
    Column("handler", String(64), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("detail", Text, nullable=False),
    Index(None, "violation_id"),
)

MAX_DETAIL = 2000


@dataclass(frozen=True)
class NewViolation:
    """A violation as first seen."""

    kind: str
    host: str
    gpu: str
    gpu_uuid: str
    offender: str | None
    holder: str | None
    reservation_id: int | None
    level: int
    pids: tuple[int, ...]
    commands: tuple[str, ...]
    detail: str | None
    started_at: datetime


@dataclass(frozen=True)
class ActionRecord:
    """One handler's action on a violation and how it went ('ok' or 'failed')."""

    at: datetime
    step: int | None
    handler: str
    outcome: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "step": self.step,
            "handler": self.handler,
            "outcome": self.outcome,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class ViolationRecord:
    """A stored violation with its actions."""

    id: int
    kind: str
    host: str
    gpu: str
    gpu_uuid: str
    offender: str | None
    holder: str | None
    reservation_id: int | None
    level: int
    pids: tuple[int, ...]
    commands: tuple[str, ...]
    detail: str | None
    started_at: datetime
    last_seen_at: datetime
    ended_at: datetime | None
    actions: tuple[ActionRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "host": self.host,
            "gpu": self.gpu,
            "gpu_uuid": self.gpu_uuid,
            "offender": self.offender,
            "holder": self.holder,
            "reservation": self.reservation_id,
            "level": self.level,
            "pids": list(self.pids),
            "commands": list(self.commands),
            "detail": self.detail,
            "start": self.started_at.isoformat(),
            "last_seen": self.last_seen_at.isoformat(),
            "end": self.ended_at.isoformat() if self.ended_at else None,
            "ongoing": self.ended_at is None,
            "actions": [a.to_json() for a in self.actions],
        }


class Violations:
    """Violation rows: opened, kept fresh and closed once per sweep; queried by the API."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def sync(
        self,
        at: datetime,
        opened: Sequence[NewViolation] = (),
        seen: Mapping[int, tuple[tuple[int, ...], tuple[str, ...]]] | None = None,
        closed: Sequence[int] = (),
    ) -> list[int]:
        """Record one sweep in one transaction: new rows (ids returned), seen ones, ended ones."""
        if not opened and not seen and not closed:
            return []
        v = violations

        def work(conn: Connection) -> list[int]:
            ids = []
            for new in opened:
                row = conn.execute(insert(v).values(**_values(new), last_seen_at=at))
                ids.append(int(row.inserted_primary_key[0]))  # type: ignore[index]
            for vid, (pids, commands) in (seen or {}).items():
                conn.execute(
                    update(v)
                    .where(v.c.id == vid)
                    .values(last_seen_at=at, pids=json.dumps(pids), commands=_json(commands))
                )
            if closed:
                conn.execute(
                    update(v).where(v.c.id.in_(list(closed))).values(ended_at=at, last_seen_at=at)
                )
            return ids

        return self.db.write(work)

    def add_action(
        self, violation_id: int, at: datetime, step: int | None, handler: str, ok: bool, detail: str
    ) -> None:
        """Record what one handler did (or failed to do) about a violation."""
        values = {
            "violation_id": violation_id,
            "at": at,
            "step": step,
            "handler": handler[:64],
            "outcome": "ok" if ok else "failed",
            "detail": detail[:MAX_DETAIL],
        }
        self.db.write(lambda conn: conn.execute(insert(violation_actions).values(**values)))

    def close_stale(self) -> int:
        """End violations a previous run left open, at the last time they were seen."""
        v = violations

        def work(conn: Connection) -> int:
            done = conn.execute(
                update(v).where(v.c.ended_at.is_(None)).values(ended_at=v.c.last_seen_at)
            )
            return int(done.rowcount or 0)

        return self.db.write(work)

    def query(
        self,
        start: datetime,
        end: datetime,
        *,
        user: str | None = None,
        host: str | None = None,
        reservation_id: int | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1000,
        involving: tuple[str, str] | None = None,
    ) -> list[ViolationRecord]:
        """Violations overlapping [start, end), newest first; `user` is offender or holder;
        `involving` (holder, offender) keeps those with that holder or that offender."""
        v = violations
        q = select(v).where(v.c.started_at < end, or_(v.c.ended_at.is_(None), v.c.ended_at > start))
        if user is not None:
            q = q.where(or_(v.c.offender == user, v.c.holder == user))
        if involving is not None:
            q = q.where(or_(v.c.holder == involving[0], v.c.offender == involving[1]))
        if host is not None:
            q = q.where(v.c.host == host)
        if reservation_id is not None:
            q = q.where(v.c.reservation_id == reservation_id)
        if kinds:
            q = q.where(v.c.kind.in_(list(kinds)))
        return self._load(q.order_by(v.c.started_at.desc(), v.c.id.desc()).limit(limit))

    def for_reservation(self, reservation_id: int) -> list[ViolationRecord]:
        """Every violation and idle notice during one reservation, oldest first."""
        v = violations
        q = select(v).where(v.c.reservation_id == reservation_id)
        return self._load(q.order_by(v.c.started_at, v.c.id))

    def get(self, violation_id: int) -> ViolationRecord | None:
        found = self._load(select(violations).where(violations.c.id == violation_id))
        return found[0] if found else None

    def _load(self, query: Any) -> list[ViolationRecord]:
        a = violation_actions
        with self.db.read() as conn:
            rows = conn.execute(query).all()
            actions: dict[int, list[ActionRecord]] = {}
            ids = [row.id for row in rows]
            for i in range(0, len(ids), 5000):
                found = conn.execute(
                    select(a).where(a.c.violation_id.in_(ids[i : i + 5000])).order_by(a.c.id)
                ).all()
                for r in found:
                    actions.setdefault(r.violation_id, []).append(
                        ActionRecord(r.at, r.step, r.handler, r.outcome, r.detail)
                    )
        return [_record(row, actions.get(row.id, [])) for row in rows]


def _json(values: Sequence[str]) -> str:
    return json.dumps([s[:500] for s in values])


def _values(new: NewViolation) -> dict[str, Any]:
    return {
        "kind": new.kind,
        "host": new.host[:128],
        "gpu": new.gpu[:255],
        "gpu_uuid": new.gpu_uuid[:96],
        "offender": new.offender,
        "holder": new.holder,
        "reservation_id": new.reservation_id,
        "level": new.level,
        "pids": json.dumps(new.pids),
        "commands": _json(new.commands),
        "detail": new.detail,
        "started_at": new.started_at,
    }


def _record(row: Any, actions: Sequence[ActionRecord]) -> ViolationRecord:
    return ViolationRecord(
        row.id,
        row.kind,
        row.host,
        row.gpu,
        row.gpu_uuid,
        row.offender,
        row.holder,
        row.reservation_id,
        row.level,
        tuple(json.loads(row.pids)),
        tuple(json.loads(row.commands)),
        row.detail,
        row.started_at,
        row.last_seen_at,
        row.ended_at,
        tuple(actions),
    )
