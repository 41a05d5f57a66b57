"""The store on real SQLite and PostgreSQL: the database itself refuses overlaps, migrations."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import bindparam, create_engine, event, func, select, text
from sqlalchemy.exc import IntegrityError

from jupyter_gpuhive.errors import Conflict, NotFound
from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.model import UTC, Gpu, Identity
from jupyter_gpuhive.store import Changes, Store
from jupyter_gpuhive.store.database import MIGRATIONS, Checkpointer, Database
from jupyter_gpuhive.store.schema import UTCDateTime, metadata, reservation_gpus
from tests.conftest import HOSTS

BASE = datetime(2030, 1, 7, 10, tzinfo=UTC)  # far ahead: the store itself has no horizon


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url).open()
    opened.inventory.sync(parse_hosts(HOSTS))
    yield opened
    opened.close()


def gpu(store: Store, ref: str) -> Gpu:
    found = store.inventory.gpu(ref)
    assert found is not None, ref
    return found


_NEW_RESERVATION = text(
    "INSERT INTO reservations (owner, title, description, start_at, end_at, created_at, flagged) "
    "VALUES ('mallory', 'sneaky', '', :s, :e, :s, false)"
).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))
_NEW_ROW = text(
    "INSERT INTO reservation_gpus "
    "(reservation_id, gpu_id, device_id, start_at, end_at, cancelled) "
    "VALUES (:rid, :gid, :gid, :s, :e, :c)"
).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))


def raw_insert(
    store: Store, gpu_id: int, start: datetime, end: datetime, cancelled: bool = False
) -> int:
    """Insert a reservation and its GPU row with plain SQL, bypassing every app check."""
    with store.db.writer.begin() as conn:
        conn.execute(_NEW_RESERVATION, {"s": start, "e": end})
        rid = int(conn.execute(text("SELECT max(id) FROM reservations")).scalar_one())
        conn.execute(_NEW_ROW, {"rid": rid, "gid": gpu_id, "s": start, "e": end, "c": cancelled})
    return rid


def live_rows(store: Store, gpu_id: int) -> list[tuple[int, datetime, datetime]]:
    rg = reservation_gpus
    with store.db.read() as conn:
        rows = conn.execute(
            select(rg.c.reservation_id, rg.c.start_at, rg.c.end_at)
            .where(rg.c.gpu_id == gpu_id, rg.c.cancelled.is_(False))
            .order_by(rg.c.start_at)
        ).all()
    return [tuple(row) for row in rows]


def test_database_refuses_overlapping_rows_written_behind_the_apps_back(store: Store) -> None:
    g0, g1 = gpu(store, "gpu1:0"), gpu(store, "gpu1:1")
    first = store.reservations.create(
        "alice", "train", "", BASE, BASE + timedelta(hours=2), [g0.id, g1.id]
    )
    before = live_rows(store, g0.id)
    assert before == [(first.id, BASE, BASE + timedelta(hours=2))]
    overlaps = [
        (BASE + timedelta(hours=1), BASE + timedelta(hours=3)),  # tail
        (BASE - timedelta(hours=1), BASE + timedelta(minutes=1)),  # head
        (BASE + timedelta(minutes=30), BASE + timedelta(minutes=40)),  # inside
        (BASE - timedelta(hours=1), BASE + timedelta(hours=5)),  # around
    ]
    for start, end in overlaps:
        with pytest.raises(IntegrityError):
            raw_insert(store, g0.id, start, end)
    assert live_rows(store, g0.id) == before  # every refused transaction rolled back
    assert store.reservations.count() == 1

    # Back-to-back is fine, and so is an overlapping row that is cancelled.
    after = raw_insert(store, g0.id, BASE + timedelta(hours=2), BASE + timedelta(hours=3))
    raw_insert(store, g1.id, BASE - timedelta(hours=1), BASE, cancelled=False)
    ghost = raw_insert(store, g0.id, BASE, BASE + timedelta(hours=1), cancelled=True)
    assert [row[0] for row in live_rows(store, g0.id)] == [first.id, after]

    # Updates are checked too: un-cancelling the ghost, or stretching a row over another.
    with pytest.raises(IntegrityError), store.db.writer.begin() as conn:
        conn.execute(
            text("UPDATE reservation_gpus SET cancelled = false WHERE reservation_id = :r"),
            {"r": ghost},
        )
    stretch = text(
        "UPDATE reservation_gpus SET start_at = :s WHERE reservation_id = :r"
    ).bindparams(bindparam("s", type_=UTCDateTime))
    with pytest.raises(IntegrityError), store.db.writer.begin() as conn:
        conn.execute(stretch, {"s": BASE + timedelta(hours=1), "r": after})
    assert [row[0] for row in live_rows(store, g0.id)] == [first.id, after]


def test_threaded_race_on_the_store_has_exactly_one_winner(store: Store) -> None:
    gpus = [gpu(store, ref) for ref in ("gpu2:0", "gpu2:1", "gpu2:2")]
    barrier = threading.Barrier(20)
    won: list[int] = []
    lost: list[str] = []
    failed: list[BaseException] = []
    lock = threading.Lock()

    def contender(i: int) -> None:
        chosen = [gpus[0].id] + ([gpus[1 + i % 2].id] if i % 3 else [])
        start = BASE + timedelta(minutes=i)
        barrier.wait()
        try:
            made = store.reservations.create(
                f"user{i}", f"run {i}", "", start, BASE + timedelta(hours=3), chosen
            )
        except Conflict as error:
            with lock:
                lost.append(error.message)
        except BaseException as error:  # anything else is a failure of the test
            with lock:
                failed.append(error)
        else:
            with lock:
                won.append(made.id)

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failed, failed
    assert len(won) == 1, (won, lost)
    assert len(lost) == 19
    assert all("gpu2:0" in message and "reserved by user" in message for message in lost)
    assert [row[0] for row in live_rows(store, gpus[0].id)] == won
    assert store.reservations.count() == 1


def test_first_sightings_of_a_user_may_race(store: Store) -> None:
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def touch(i: int) -> None:
        groups = frozenset({"phd", "ml"} if i % 2 else {"phd"})
        with store.db.read() as conn:  # open the pool's connections before the race
            conn.execute(text("SELECT 1"))
            barrier.wait()
        try:
            store.users.touch(Identity("newbie", groups))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=touch, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert set(store.users.all()) == {"newbie"}
    assert set(store.users.all()["newbie"]) <= {"phd", "ml"}
    store.users.touch(Identity("newbie", frozenset({"staff"})))
    assert store.users.all() == {"newbie": ["staff"]}
    assert store.users.groups_of("newbie") == frozenset({"staff"})


def test_modify_cancel_and_window(store: Store) -> None:
    g0, g1, g2 = (gpu(store, f"gpu3:{i}") for i in range(3))
    one = store.reservations.create("alice", "a", "", BASE, BASE + timedelta(hours=1), [g0.id])
    two = store.reservations.create(
        "bob", "b", "", BASE + timedelta(hours=1), BASE + timedelta(hours=2), [g1.id, g2.id]
    )
    # Moving bob's reservation onto alice's GPU and time clashes; nothing changes.
    with pytest.raises(Conflict, match="alice"):
        store.reservations.modify(two.id, lambda old: Changes(start=BASE, gpu_ids=(g0.id, g1.id)))
    assert store.reservations.get(two.id) == two
    moved = store.reservations.modify(
        two.id, lambda old: Changes(title="b2", gpu_ids=(g0.id, g2.id))
    )
    assert [g.ref for g in moved.gpus] == ["gpu3:0", "gpu3:2"]
    assert moved.title == "b2"
    assert live_rows(store, g1.id) == []
    window = store.reservations.window(BASE, BASE + timedelta(hours=3))
    assert [r.id for r in window] == [one.id, two.id]
    assert [
        r.id for r in store.reservations.window(BASE, BASE + timedelta(hours=3), owner="bob")
    ] == [two.id]
    only_g2 = store.reservations.window(BASE, BASE + timedelta(hours=3), gpu_ids=[g2.id])
    assert [r.id for r in only_g2] == [two.id]
    gone = store.reservations.modify(one.id, lambda old: Changes(cancelled_at=BASE))
    assert gone.cancelled
    assert [r.id for r in store.reservations.window(BASE, BASE + timedelta(hours=3))] == [two.id]
    everything = store.reservations.window(BASE, BASE + timedelta(hours=3), include_cancelled=True)
    assert [r.id for r in everything] == [one.id, two.id]
    # The cancelled slot is free again.
    again = store.reservations.create("carol", "c", "", BASE, BASE + timedelta(hours=1), [g0.id])
    assert again.id > two.id
    with pytest.raises(NotFound, match="no reservation 9999"):
        store.reservations.get(9999)


def test_inventory_sync_is_idempotent_and_never_forgets(store: Store) -> None:
    gpus_before = store.inventory.gpus()
    assert len(gpus_before) == 12
    assert [h.name for h in store.inventory.hosts()] == ["gpu1", "gpu2", "gpu3"]
    store.inventory.sync(parse_hosts(HOSTS[:1]))  # gpu2/gpu3 no longer configured
    assert store.inventory.gpus() == gpus_before
    by_uuid = store.inventory.gpu(gpus_before[5].uuid)
    assert by_uuid == gpus_before[5]
    assert store.inventory.gpu("gpu9:0") is None


def test_migrations_match_the_schema(db_url: str) -> None:
    store = Store(db_url).open()
    store.db.migrate()  # a second upgrade is a no-op
    store.close()
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
            head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
            assert context.get_current_revision() == head
            assert conn.execute(select(func.count()).select_from(reservation_gpus)).scalar() == 0
            if engine.dialect.name == "postgresql":
                found = conn.execute(
                    text("SELECT contype FROM pg_constraint WHERE conname = :n"),
                    {"n": "reservation_gpus_no_overlap"},
                ).scalar()
                assert found == "x"  # an exclusion constraint
            else:
                triggers = (
                    conn.execute(
                        text("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
                    )
                    .scalars()
                    .all()
                )
                assert triggers == [
                    "reservation_gpus_no_overlap_insert",
                    "reservation_gpus_no_overlap_update",
                    "reserved_monthly_stale_r_delete",
                    "reserved_monthly_stale_r_update",
                    "reserved_monthly_stale_rg_delete",
                    "reserved_monthly_stale_rg_insert",
                    "reserved_monthly_stale_rg_update",
                ]
    finally:
        engine.dispose()


def test_writers_of_one_process_take_turns_without_meeting_sqlites_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With SQLite's busy wait off, 8 threads writing at once still never find the database
    locked: they queue on the Database's own lock (SQLite's busy handler would make them
    sleep 1, 2, 5, 10... ms instead of waking them when the writer is done)."""
    db = Database(f"sqlite:///{tmp_path / 'turns.sqlite'}")

    @event.listens_for(db.writer, "connect")
    def _no_busy_wait(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=0")

    db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE n (v INTEGER)"))
    barrier = threading.Barrier(8)

    def writer(k: int) -> None:
        barrier.wait()
        for i in range(20):

            def work(conn: Any, v: int = k * 100 + i) -> None:
                conn.exec_driver_sql(f"INSERT INTO n VALUES ({v})")
                time.sleep(0.001)  # hold the write lock a while: the others must wait

            db.write(work)

    caplog.set_level(logging.DEBUG, logger="jupyter_gpuhive.store.database")
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db.read() as conn:
        assert conn.exec_driver_sql("SELECT count(DISTINCT v) FROM n").scalar() == 160
    assert not [r for r in caplog.records if "retrying write" in r.getMessage()]
    db.reader.dispose()
    db.writer.dispose()


def test_the_write_ahead_log_is_checkpointed_off_the_writers_path(tmp_path: Path) -> None:
    """Writers never checkpoint (it would hold the writers' lock through two fsyncs); the
    Checkpointer thread copies the log into the database after Checkpointer.EVERY commits."""
    path = tmp_path / "log.sqlite"
    db = Database(f"sqlite:///{path}")
    db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE blobs (b BLOB)"))
    with db.writer.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    before = path.stat().st_size
    for _ in range(Checkpointer.EVERY):
        db.write(lambda conn: conn.exec_driver_sql("INSERT INTO blobs VALUES (randomblob(8000))"))
    # 200 × 8 kB went to the log (under SQLite's own threshold of 1,000 pages); the thread
    # copies it into the database file within a moment
    deadline = time.monotonic() + 20
    while path.stat().st_size < before + 1_000_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.stat().st_size >= before + 1_000_000
    db.dispose()


@pytest.mark.parametrize("opened", [3])
def test_replicas_started_at_once_bring_the_schema_up_once(db_url: str, opened: int) -> None:
    """`systemctl start gpuhive@1 gpuhive@2 gpuhive@3` starts replicas together on an empty
    database: each migrates at start (its own process), and none may fail on another's
    half-made schema."""
    go = (
        "import json, sys\n"
        "from jupyter_gpuhive.hosts.config import parse_hosts\n"
        "from jupyter_gpuhive.store import Store\n"
        "store = Store(sys.argv[1]).open()  # as Hive.open: migrate, then sync the hosts\n"
        "store.inventory.sync(parse_hosts(json.loads(sys.argv[2])))\n"
        "store.close()\n"
    )
    argv = [sys.executable, "-c", go, db_url, json.dumps(HOSTS)]
    starts = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(opened)
    ]
    outputs = [start.communicate(timeout=120)[0].decode(errors="replace") for start in starts]
    assert [start.returncode for start in starts] == [0] * opened, outputs
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
            assert MigrationContext.configure(conn).get_current_revision() == head
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        store = Store(db_url).open()
        try:  # every host and GPU once
            assert [h.name for h in store.inventory.hosts()] == [h["name"] for h in HOSTS]
            assert len(store.inventory.gpus()) == 4 * len(HOSTS)
        finally:
            store.close()
    finally:
        engine.dispose()


def test_an_inventory_reload_sees_one_state_while_another_replica_adds_hosts(db_url: str) -> None:
    """A reload reads hosts, then GPUs: on PostgreSQL's READ COMMITTED the second statement
    would also see the GPUs of a host another replica committed in between (KeyError in
    reload, seen with replicas started together). Its snapshot sees neither."""
    store = Store(db_url).open()
    other = Store(db_url).open()
    try:
        store.inventory.sync(parse_hosts(HOSTS[:1]))
        with store.db.snapshot() as conn:
            before = conn.execute(select(func.count()).select_from(reservation_gpus)).scalar()
            hosts_seen = conn.execute(text("SELECT count(*) FROM hosts")).scalar()
            other.inventory.sync(parse_hosts(HOSTS[1:]))  # commits while the snapshot is open
            gpus_seen = conn.execute(text("SELECT count(*) FROM gpus")).scalar()
            assert before == 0
        assert (hosts_seen, gpus_seen) == (1, 4)
        store.inventory.reload()
        assert [h.name for h in store.inventory.hosts()] == [h["name"] for h in HOSTS]
    finally:
        other.close()
        store.close()


def test_a_booking_is_written_whole_and_the_longest_length_is_kept_by_every_replica(
    db_url: str,
) -> None:
    """A booking's reservation and unit rows are written together (on PostgreSQL in one
    statement); `reservation_stats` keeps the longest length while each process skips the
    update for a booking no longer than the longest it knows, so a window still finds a long
    booking another replica made (the window's lower bound comes from that length)."""
    one, two = Store(db_url).open(), Store(db_url).open()
    try:
        one.inventory.sync(parse_hosts(HOSTS))
        two.inventory.reload()
        g0, g1, g2 = (gpu(one, f"gpu1:{i}") for i in range(3))
        pair = one.reservations.create(
            "alice", "pair", "", BASE, BASE + timedelta(hours=1), [g0.id, g1.id]
        )
        assert [g.ref for g in pair.gpus] == ["gpu1:0", "gpu1:1"]
        assert one.reservations.get(pair.id) == pair
        assert [r for r, *_ in live_rows(one, g1.id)] == [pair.id]
        long = two.reservations.create("bob", "long", "", BASE, BASE + timedelta(days=9), [g2.id])
        # `one` knows only 1 h: its next 1 h booking leaves the row alone, and must not lower it
        one.reservations.create(
            "alice", "short", "", BASE + timedelta(hours=2), BASE + timedelta(hours=3), [g0.id]
        )
        with one.db.read() as conn:
            stored = conn.execute(text("SELECT longest_seconds FROM reservation_stats")).scalar()
        assert stored == 9 * 86400 + 1
        late = BASE + timedelta(days=8)
        assert [r.id for r in one.reservations.window(late, late + timedelta(hours=1))] == [long.id]
        with pytest.raises(Conflict, match="bob"):  # the unit rows refuse a clash as before
            one.reservations.create("carol", "c", "", late, late + timedelta(hours=1), [g2.id])
    finally:
        one.close()
        two.close()


def test_pooled_connections_the_server_ended_are_replaced(db_url: str, monkeypatch: Any) -> None:
    """PostgreSQL: a pooled connection idle for a while is pinged before use, so one that the
    server ended meanwhile (a restart, an idle timeout) is replaced instead of failing the
    next read or write; one in steady use is not pinged (a round trip per transaction)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite has no server to end a connection")
    from jupyter_gpuhive.store import database

    store = Store(db_url).open()
    try:
        store.inventory.sync(parse_hosts(HOSTS))
        pings: list[int] = []
        real_ping = store.db.reader.dialect.do_ping
        monkeypatch.setattr(
            store.db.reader.dialect, "do_ping", lambda c: pings.append(1) or real_ping(c)
        )
        for _ in range(3):  # in steady use: no pings
            assert store.reservations.count() == 0
        assert pings == []
        monkeypatch.setattr(database, "PING_AFTER_IDLE", 0.0)
        own = store.db.reader.pool.checkedin()
        assert own >= 1
        killer = create_engine(db_url)
        with killer.begin() as conn:  # end every other session of this database
            ended = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
        killer.dispose()
        assert ended and ended >= own
        assert store.reservations.count() == 0  # a read on a fresh connection
        g0 = gpu(store, "gpu1:0")
        made = store.reservations.create("alice", "a", "", BASE, BASE + timedelta(hours=1), [g0.id])
        assert store.reservations.get(made.id).title == "a"
        assert pings  # the idle connections were pinged, and the dead ones replaced
    finally:
        store.close()
