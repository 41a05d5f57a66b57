"""Webhook rows: endpoints, and the delivery log (deliveries and their attempts).

On SQLite the delivery log is a database file of its own next to the main one (`log_database`):
the courier writes it several times a second, and in the main file each of those
transactions held SQLite's one write lock, which the reservation API's bookings then waited
for (measured: the slowest bookings during webhook delivery were all those that overlapped a
log write, whose transactions took 5 to 180 ms in the courier's busy process on a loaded
machine). On PostgreSQL the log stays in the main database (row locks, no such contention).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, delete, insert, inspect, select, update
from sqlalchemy.engine import make_url

from .database import Database, inserted_id
from .schema import log_metadata, webhook_attempts, webhook_deliveries, webhooks

LOG_SUFFIX = "-webhook-log"  # hive.sqlite -> hive-webhook-log.sqlite
_COPY_CHUNK = 5000


def log_path(db: Database) -> Path | None:
    """The file of the delivery log of a SQLite database (None on PostgreSQL)."""
    if db.dialect != "sqlite":
        return None
    main = Path(str(make_url(db.url).database)).expanduser()
    return main.with_name(main.stem + LOG_SUFFIX + (main.suffix or ".sqlite"))


def log_database(db: Database) -> Database:
    """The database that holds the delivery log: on SQLite its own file (made on first use,
    with what the main file's log held), on PostgreSQL `db` itself."""
    path = log_path(db)
    if path is None:
        return db
    log = Database(f"sqlite:///{path}")

    def create(conn: Connection) -> None:
        fresh = not inspect(conn).has_table("webhook_deliveries")
        log_metadata.create_all(conn)
        if fresh:
            _copy_log(db, conn)

    log.write(create)
    return log


def _copy_log(main: Database, into: Connection) -> None:
    """Copy the rows a main database's log tables hold (those written before the log had a
    file of its own) into a new log file."""
    for table in (webhook_deliveries, webhook_attempts):
        last = 0
        while True:
            with main.read() as conn:
                query = select(table).where(table.c.id > last).order_by(table.c.id)
                rows = [row._asdict() for row in conn.execute(query.limit(_COPY_CHUNK))]
            if not rows:
                break
            into.execute(insert(table), rows)
            last = rows[-1]["id"]


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

    db: Database
    _log: Database | None = None

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def log_db(self) -> Database:
        """Where the delivery log is (opened on first use)."""
        if self._log is None:
            self._log = log_database(self.db)
        return self._log

    def close_log(self) -> None:
        """Close the delivery log's own connections (SQLite)."""
        if self._log is not None and self._log is not self.db:
            self._log.dispose()
        self._log = None

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
        """Delete an endpoint and its delivery log (ids are never reused)."""
        self.db.write(
            lambda conn: conn.execute(delete(webhooks).where(webhooks.c.id == webhook_id))
        )
        if self.log_db is not self.db:  # the log's attempts go with it (a foreign key there)
            d = webhook_deliveries.c
            self.log_db.write(
                lambda conn: conn.execute(
                    delete(webhook_deliveries).where(d.webhook_id == webhook_id)
                )
            )

    def write_log(self, ops: Sequence[tuple[Any, ...]]) -> None:
        """Deliveries and attempts, in order, in one transaction (a few statements per batch).

        ('delivery', (webhook_id, event_id), event, body, at) queues one;
        ('attempt', (webhook_id, event_id), at, status, error, ms, state) logs one attempt
        and moves its delivery to `state` (pending, delivered, dead). Endpoints deleted
        meanwhile are skipped.
        """
        d = webhook_deliveries.c
        if not ops:
            return
        with self.db.read() as conn:
            existing = set(conn.execute(select(webhooks.c.id)).scalars())
        live = [op for op in ops if op[1][0] in existing]

        def work(conn: Connection) -> None:
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

        if live:
            self.log_db.write(work)

    @staticmethod
    def _delivery_ids(conn: Connection, keys: set[tuple[int, str]]) -> dict[tuple[int, str], int]:
        """The row ids of deliveries by (webhook_id, event_id), through the index on both
        (by event_id alone, every batch read the whole log, in the write transaction)."""
        d = webhook_deliveries.c
        found: dict[tuple[int, str], int] = {}
        by_webhook: dict[int, list[str]] = {}
        for webhook_id, event_id in sorted(keys):
            by_webhook.setdefault(webhook_id, []).append(event_id)
        for webhook_id, events in by_webhook.items():
            for i in range(0, len(events), 500):
                rows = conn.execute(
                    select(d.id, d.event_id).where(
                        d.webhook_id == webhook_id, d.event_id.in_(events[i : i + 500])
                    )
                )
                found |= {(webhook_id, e): rid for rid, e in rows}
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
        with self.log_db.read() as conn:
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
