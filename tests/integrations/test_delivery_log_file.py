"""On SQLite the webhook delivery log is a file of its own: the courier's log writes never
wait for the main database's write lock (the one the reservation API's bookings take), what
an older main file's log held is carried over, and an endpoint's log goes with it."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select

from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.integrations import Integrations as Rows
from jupyter_gpuhive.store.schema import webhook_attempts, webhook_deliveries
from jupyter_gpuhive.store.webhooks import log_path

NOW = datetime(2030, 5, 6, 7, tzinfo=timezone.utc)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    yield opened
    opened.close()


def delivered(webhook_id: int, event_id: str) -> list[tuple[object, ...]]:
    """The log entries of one delivery, made and answered 200 at once."""
    key = (webhook_id, event_id)
    return [("delivery", key, "reservation.created", '{"n": 1}', NOW),
            ("attempt", key, NOW, 200, None, 3.5, "delivered")]  # fmt: skip


def count(store: Store, table: object) -> int:
    with store.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def test_log_writes_never_wait_for_the_main_write_lock(store: Store, tmp_path: Path) -> None:
    rows = Rows(store.db)
    hook = rows.add_webhook("alice", False, "https://example.org/h", "s", "json", [], NOW)
    rows.write_log(delivered(hook.id, "e0"))  # the log file exists from here on
    locker = sqlite3.connect(tmp_path / "hive.sqlite", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # what a booking in progress holds
    done = threading.Event()
    try:
        began = time.monotonic()
        writer = threading.Thread(
            target=lambda: (rows.write_log(delivered(hook.id, "e1")), done.set()), daemon=True
        )
        writer.start()
        # In the main file the write would wait for the lock (busy_timeout: 30 s).
        assert done.wait(5), "the delivery log waited for the main database's write lock"
        assert time.monotonic() - began < 5
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    log = rows.deliveries(hook.id)
    assert [(d.event_id, d.state, d.attempts) for d in log] == [
        ("e1", "delivered", 1),
        ("e0", "delivered", 1),
    ]
    assert log[0].log == [{"at": NOW.isoformat(), "status": 200, "error": None, "ms": 3.5}]
    assert count(store, webhook_deliveries) == 0  # nothing in the main file
    path = log_path(store.db)
    assert path is not None and path.exists() and path.name == "hive-webhook-log.sqlite"
    rows.close_log()


def test_an_older_log_is_carried_over_and_goes_with_its_endpoint(store: Store) -> None:
    rows = Rows(store.db)
    kept = rows.add_webhook("alice", False, "https://example.org/a", "s", "json", [], NOW)
    gone = rows.add_webhook("bob", False, "https://example.org/b", "s", "slack", [], NOW)

    def old_log(conn: object) -> None:  # as the main file held it before the log's own file
        for hook, state in ((kept, "dead"), (gone, "pending")):
            made = conn.execute(insert(webhook_deliveries).values(  # type: ignore[attr-defined]
                webhook_id=hook.id, event_id=f"old-{hook.id}", event="job.failed", body="{}",
                state=state, attempts=1, created_at=NOW))  # fmt: skip
            conn.execute(insert(webhook_attempts).values(  # type: ignore[attr-defined]
                delivery_id=made.inserted_primary_key[0], at=NOW, status=500,
                error="HTTP 500", ms=12.0))  # fmt: skip

    store.db.write(old_log)
    assert [(d.event_id, d.state, d.log[0]["error"]) for d in rows.deliveries(kept.id)] == [
        (f"old-{kept.id}", "dead", "HTTP 500")
    ]
    rows.write_log(delivered(gone.id, "new"))
    assert {d.event_id for d in rows.deliveries(gone.id)} == {f"old-{gone.id}", "new"}
    assert {d.id for d in rows.deliveries()} == {1, 2, 3}  # ids go on after the old ones

    rows.delete_webhook(gone.id)
    assert rows.deliveries(gone.id) == []
    assert [d.event_id for d in rows.deliveries()] == [f"old-{kept.id}"]
    with rows.log_db.read() as conn:  # the attempts went too (a foreign key in the log file)
        assert conn.execute(select(func.count()).select_from(webhook_attempts)).scalar() == 1
    rows.close_log()
