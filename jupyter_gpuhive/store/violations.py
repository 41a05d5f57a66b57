"""Violation history: every violation (and idle-GPU notice) with the actions taken on it."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, or_, select, update

from ..model.violations import ActionRecord, Violation, ViolationRecord
from .database import Database
from .schema import violation_actions, violations

MAX_DETAIL = 2000


class Violations:
    """Violation rows: opened, kept fresh and closed once per sweep; queried by the API."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def sync(
        self,
        at: datetime,
        opened: Sequence[Violation] = (),
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

    def close_stale(self, keep: Collection[int] = ()) -> int:
        """End the violations left open (by a previous run or leader) but those in `keep`, at
        the last time they were seen; how many."""
        v = violations
        query = update(v).where(v.c.ended_at.is_(None))
        if keep:
            query = query.where(v.c.id.not_in(list(keep)))

        def work(conn: Connection) -> int:
            done = conn.execute(query.values(ended_at=v.c.last_seen_at))
            return int(done.rowcount or 0)

        return self.db.write(work)

    def still_open(self) -> list[ViolationRecord]:
        """The violations not ended, with their actions, oldest first."""
        v = violations
        return self._load(select(v).where(v.c.ended_at.is_(None)).order_by(v.c.id))

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


def _values(new: Violation) -> dict[str, Any]:
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
        id=row.id,
        last_seen_at=row.last_seen_at,
        ended_at=row.ended_at,
        actions=tuple(actions),
    )
