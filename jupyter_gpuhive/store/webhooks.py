"""Webhook rows: endpoints, and the delivery log (deliveries and their attempts)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, delete, insert, select, update

from .database import Database, inserted_id
from .schema import webhook_attempts, webhook_deliveries, webhooks


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


class WebhookRows:
    """Webhook endpoints and their delivery log; every write is one transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

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
        new_id = self.db.write(
            lambda conn: inserted_id(conn.execute(insert(webhooks).values(**row)))
        )
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
