"""Ids are never handed out twice: a deleted job's or rule's id never names a new one.

SQLite reuses the largest rowid after a delete unless the table says AUTOINCREMENT; PostgreSQL's
sequences never go back. Both are checked, and the migration that rebuilt the SQLite tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, create_engine, func, select, text
from sqlalchemy.exc import IntegrityError

from jupyter_gpuhive.bookings.access import parse_rule
from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.model import UTC
from jupyter_gpuhive.model.jobs import Job
from jupyter_gpuhive.model.violations import Violation
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import (
    UTCDateTime,
    job_tasks,
    jobs,
    reservation_gpus,
    reservations,
    rules,
    violation_actions,
    violations,
)
from tests.conftest import HOSTS

BASE = datetime(2030, 3, 4, 10, tzinfo=UTC)  # far ahead: the store itself has no horizon
# The tables whose ids people see (links, cached ids, API paths); SQLite needs AUTOINCREMENT.
TABLES = ("reservations", "rules", "jobs", "violations")
BEFORE = "0005"  # the last revision whose SQLite tables reused ids


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url).open()
    opened.inventory.sync(parse_hosts(HOSTS))
    yield opened
    opened.close()


def new_job(store: Store, name: str) -> int:
    return store.jobs.create(Job(name=name, owner="alice", command="true"), []).id


def old_job(store: Store, name: str) -> int:
    """A job row as the old schema holds it (the Store's own writes name newer columns)."""
    insert = text(
        "INSERT INTO jobs (name, owner, description, template, command, options, variables, "
        "sweep, env, queued, max_retries, attempts, created_at, updated_at) VALUES "
        "(:n, 'alice', '', 'plain', 'true', '{}', '{}', '{}', '{}', false, 0, 0, :t, :t)"
    ).bindparams(bindparam("t", type_=UTCDateTime))
    with store.db.writer.begin() as conn:
        conn.execute(insert, {"n": name, "t": BASE})
        return int(conn.execute(text("SELECT max(id) FROM jobs")).scalar_one())


def new_rule(store: Store, name: str) -> int:
    rule = store.rules.add(parse_rule({"name": name, "users": ["*"]}), "boss")
    assert rule.id is not None
    return rule.id


def new_reservation(store: Store, hours: int) -> int:
    gpu = store.inventory.gpu("gpu1:0")
    assert gpu is not None
    start = BASE + timedelta(hours=2 * hours)
    return store.reservations.create("bob", "t", "", start, start + timedelta(hours=1), [gpu.id]).id


def new_violation(store: Store, pid: int, reservation_id: int | None = None) -> int:
    seen = Violation(
        kind="foreign", host="gpu1", gpu="gpu1:0", gpu_uuid="GPU-x", offender="carol",
        holder="bob", reservation_id=reservation_id, level=1, pids=(pid,), commands=("x",),
        detail=None, started_at=BASE,
    )  # fmt: skip
    [made] = store.violations.sync(BASE, [seen])
    return made


def delete_row(store: Store, table: str, row_id: int) -> None:
    with store.db.writer.begin() as conn:
        conn.execute(text(f"DELETE FROM {table} WHERE id = :id"), {"id": row_id})


def test_a_deleted_id_is_never_handed_out_again(store: Store) -> None:
    first, last = new_job(store, "a"), new_job(store, "b")
    store.jobs.delete(last)
    again = new_job(store, "c")
    assert again > last > first

    kept, gone = new_rule(store, "a"), new_rule(store, "b")
    store.rules.remove(gone)
    assert new_rule(store, "c") > gone > kept

    # Reservations and violations are not deleted by gpuhive, but a purge by hand must not
    # make their ids name something else either.
    last = max(new_reservation(store, 0), new_reservation(store, 1))
    delete_row(store, "reservations", last)
    assert new_reservation(store, 2) > last
    last = max(new_violation(store, 1), new_violation(store, 2))
    delete_row(store, "violations", last)
    assert new_violation(store, 3) > last


def test_sqlite_tables_say_autoincrement(sqlite_url: str) -> None:
    store = Store(sqlite_url).open()
    try:
        with store.db.read() as conn:
            found = dict(conn.execute(text("SELECT name, sql FROM sqlite_master")).all())
        for table in TABLES:
            assert "AUTOINCREMENT" in found[table], found[table]
    finally:
        store.close()


# Columns of those tables that later revisions added: device_id (0010), the preemptible
# job's (0019), a container job's (0020), a booking's share (0022), its approval's hold (0024).
LATER = frozenset({"device_id", "preemptible", "preempt_signal", "grace_s", "restarts",
                   "container", "share_ppm", "tentative_until"})  # fmt: skip


def _snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the rebuilt tables and of the tables that point at them."""
    tables = {"reservations": reservations, "reservation_gpus": reservation_gpus,
              "rules": rules, "jobs": jobs, "job_tasks": job_tasks, "violations": violations,
              "violation_actions": violation_actions}  # fmt: skip
    with store.db.read() as conn:
        return {
            name: [
                tuple(row)
                for row in conn.execute(
                    # columns added later than the schema this snapshot is taken of
                    select(*(c for c in table.c if c.name not in LATER)).order_by(
                        *table.primary_key
                    )
                )
            ]
            for name, table in tables.items()
        }


def old_reservation(store: Store, hours: int) -> int:
    """A reservation of gpu1:0 written in the old schema's columns (the store writes newer ones)."""
    start = BASE + timedelta(hours=2 * hours)
    times = {"s": start, "e": start + timedelta(hours=1)}
    with store.db.writer.begin() as conn:
        conn.execute(_OLD_RESERVATION, times)
        rid = int(conn.execute(text("SELECT max(id) FROM reservations")).scalar_one())
        gid = conn.execute(text("SELECT id FROM gpus WHERE idx = 0")).scalar_one()
        conn.execute(_OLD_ROW, {"r": rid, "g": gid, **times})
    return rid


_OLD_RESERVATION = text(
    "INSERT INTO reservations (owner, title, description, start_at, end_at, created_at, flagged) "
    "VALUES ('bob', 't', '', :s, :e, :s, false)"
).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))
_OLD_ROW = text(
    "INSERT INTO reservation_gpus (reservation_id, gpu_id, start_at, end_at, cancelled) "
    "VALUES (:r, :g, :s, :e, false)"
).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))


def test_the_migration_keeps_every_row_and_stops_reuse(db_url: str) -> None:
    old = Store(db_url)
    old.db.migrate(BEFORE)
    with old.db.writer.begin() as conn:  # the inventory as the old schema holds it
        conn.execute(
            text(
                "INSERT INTO hosts (name, address, port, transport, declared, created_at) "
                "VALUES ('gpu1', '127.0.0.1', 22, 'local', true, :t)"
            ).bindparams(bindparam("t", type_=UTCDateTime)),
            {"t": BASE},
        )
        conn.execute(
            text("INSERT INTO gpus (host_id, idx, uuid) SELECT id, 0, 'GPU-old-0' FROM hosts")
        )
    booked = [old_reservation(old, hours) for hours in range(3)]
    new_rule(old, "a")
    job_id = old_job(old, "j")
    with old.db.writer.begin() as conn:  # a task row, which points at its job
        conn.execute(
            text(
                "INSERT INTO job_tasks (job_id, idx, host, address, role, gpus, gpu_indices, "
                "command, env, variables, session, log_path, exit_path, state) VALUES "
                "(:j, 0, 'gpu1', '127.0.0.1', 'task', '[]', '[]', 'true', '{}', '{}', 's', 'l', "
                "'e', 'pending')"
            ),
            {"j": job_id},
        )
    violation = new_violation(old, 7, reservation_id=booked[1])
    old.violations.add_action(violation, BASE, 1, "terminal", True, "told carol")
    doomed = old_job(old, "last")
    with old.db.writer.begin() as conn:  # before the migration: nothing new has this id yet
        conn.execute(text("DELETE FROM jobs WHERE id = :i"), {"i": doomed})
    before = _snapshot(old)
    old.close()

    store = Store(db_url).open()  # upgrades to the newest revision
    try:
        assert _snapshot(store) == before  # cascades and SET NULL did not fire
        assert len(before["reservation_gpus"]) == 3
        assert [v[0] for v in before["violation_actions"]] and before["job_tasks"]
        with store.db.read() as conn:
            rid = conn.execute(select(violations.c.reservation_id)).scalar_one()
        assert rid == booked[1]
        # The database still refuses overlaps, and still cascades a deleted job to its tasks.
        gpu = store.inventory.gpu("gpu1:0")
        assert gpu is not None
        clash = text(
            "INSERT INTO reservation_gpus "
            "(reservation_id, gpu_id, device_id, start_at, end_at, cancelled) "
            "VALUES (:r, :g, :g, :s, :e, false)"
        ).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))
        with pytest.raises(IntegrityError), store.db.writer.begin() as conn:
            conn.execute(
                clash, {"r": booked[0], "g": gpu.id, "s": BASE, "e": BASE + timedelta(hours=9)}
            )
        store.jobs.delete(job_id)
        with store.db.read() as conn:
            assert conn.execute(select(func.count()).select_from(job_tasks)).scalar() == 0
        # Ids go on above the largest one the table holds.
        last = new_job(store, "after")
        assert last > job_id
        store.jobs.delete(last)
        assert new_job(store, "again") > last
    finally:
        store.close()
    if db_url.startswith("sqlite"):
        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
                triggers = conn.execute(
                    text("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
                ).scalars()
                # the overlap rule survived every rebuild (0011 adds roll-up triggers besides)
                assert {
                    "reservation_gpus_no_overlap_insert",
                    "reservation_gpus_no_overlap_update",
                } <= set(triggers)
        finally:
            engine.dispose()
