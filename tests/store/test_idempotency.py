"""Idempotency keys' rows: claims, answers, races, stale and lost claims, expiry."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from jupyter_gpuhive.model import utcnow
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.errand import ERRAND, Dropped, Errand

DAY, MINUTE = timedelta(hours=24), timedelta(minutes=1)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url).open()
    yield opened
    opened.close()


def test_the_first_claim_runs_and_a_retry_gets_its_answer(store: Store) -> None:
    keys, now = store.idempotency, utcnow()
    assert keys.claim("alice", "k1", "fp", now, DAY, MINUTE).outcome == "claimed"
    assert keys.claim("alice", "k1", "fp", now, DAY, MINUTE).outcome == "busy"
    assert keys.claim("alice", "k1", "other", now, DAY, MINUTE).outcome == "mismatch"
    assert keys.claim("bob", "k1", "other", now, DAY, MINUTE).outcome == "claimed"  # per user
    keys.answer("alice", "k1", 201, '{"id": 7}', "/api/reservations/7")
    replay = keys.claim("alice", "k1", "fp", now, DAY, MINUTE)
    assert (replay.outcome, replay.status, replay.body, replay.location) == (
        "replay", 201, '{"id": 7}', "/api/reservations/7",
    )  # fmt: skip


def test_key_bookkeeping_runs_alone_never_as_part_of_a_request(store: Store) -> None:
    """A key's claim, answer and release are each one statement on their own (PostgreSQL:
    autocommit), outside any request's errand: one that tried to run as a request's own
    change would escape its errand's checks (deadline, Hub confirmation), so it is refused."""
    token = ERRAND.set(Errand.starting(60))
    try:
        with pytest.raises(RuntimeError, match="not for a request's own changes"):
            store.idempotency.claim("alice", "k9", "fp", utcnow(), DAY, MINUTE)
    finally:
        ERRAND.reset(token)
    assert store.idempotency.get("alice", "k9") is None
    assert store.idempotency.claim("alice", "k9", "fp", utcnow(), DAY, MINUTE).outcome == "claimed"
    store.idempotency.release("alice", "k9")
    assert store.idempotency.get("alice", "k9") is None


def test_a_key_is_marked_applied_in_the_transaction_of_the_write(store: Store) -> None:
    keys, now = store.idempotency, utcnow()
    keys.claim("alice", "k2", "fp", now, DAY, MINUTE)
    errand = Errand.starting(60)
    errand.on_write = lambda conn: keys.applied(conn, "alice", "k2")
    token = ERRAND.set(errand)
    try:
        with pytest.raises(RuntimeError):  # the write fails: neither it nor the mark commits
            store.db.write(lambda conn: _fail(conn))
        assert keys.get("alice", "k2")["status"] is None  # type: ignore[index]
        assert not errand.wrote
        store.db.write(lambda conn: conn.execute(text("SELECT 1")))
    finally:
        ERRAND.reset(token)
    assert errand.wrote
    assert keys.get("alice", "k2")["status"] == 0  # type: ignore[index]
    # a failed request that changed something keeps its key: release frees only clean claims
    keys.release("alice", "k2")
    assert keys.get("alice", "k2") is not None
    assert keys.claim("alice", "k2", "fp", now, DAY, MINUTE).outcome == "busy"
    later = now + 2 * MINUTE
    assert keys.claim("alice", "k2", "fp", later, DAY, MINUTE).outcome == "lost"


def _fail(conn: object) -> None:
    raise RuntimeError("the write fails")


def test_stale_clean_claims_are_taken_over_and_keys_expire(store: Store) -> None:
    keys, now = store.idempotency, utcnow()
    keys.claim("alice", "k3", "fp", now, DAY, MINUTE)
    assert keys.claim("alice", "k3", "fp", now + 2 * MINUTE, DAY, MINUTE).outcome == "claimed"
    keys.answer("alice", "k3", 201, "{}", None)
    assert keys.claim("alice", "k3", "new", now + DAY / 2, DAY, MINUTE).outcome == "mismatch"
    assert keys.claim("alice", "k3", "new", now + 2 * DAY, DAY, MINUTE).outcome == "claimed"
    keys.claim("alice", "old", "fp", now - 2 * DAY, DAY, MINUTE)
    keys._purged = 0.0  # the once-a-minute purge: due now
    keys.claim("alice", "k4", "fp", now, DAY, MINUTE)
    assert keys.get("alice", "old") is None
    keys.release("alice", "k4")  # a failed request that changed nothing frees its key
    assert keys.get("alice", "k4") is None


def test_concurrent_claims_of_one_key_let_one_run(store: Store) -> None:
    keys, now = store.idempotency, utcnow()
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def claim() -> None:
        start.wait()
        outcomes.append(keys.claim("alice", "race", "fp", now, DAY, MINUTE).outcome)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["busy"] * 7 + ["claimed"]


def test_an_errand_refuses_to_start_work_for_a_client_that_has_gone() -> None:
    errand = Errand.starting(60)
    errand.check()
    errand.closed = True
    with pytest.raises(Dropped, match="closed its connection"):
        errand.check()
    errand.committed()  # once something of it committed, the request runs to its answer
    errand.check()
    late = Errand.starting(-1)
    with pytest.raises(Dropped, match="deadline of -1 s"):
        late.check()


async def test_a_request_that_reaches_hosts_runs_to_its_end_once_started() -> None:
    """`whole`: after its first piece of work, a launch records what it did on a host even
    if its client has gone meanwhile; other requests start nothing more."""
    from concurrent.futures import ThreadPoolExecutor

    from jupyter_gpuhive.store.errand import in_executor

    done: list[str] = []
    with ThreadPoolExecutor(1) as pool:
        for whole in (True, False):
            errand = Errand.starting(60, whole=whole)
            token = ERRAND.set(errand)
            try:
                await in_executor(pool, lambda w=whole: done.append(f"launch {w}"))
                errand.closed = True  # the client gave up while the host did its part
                with contextlib.suppress(Dropped):
                    await in_executor(pool, lambda w=whole: done.append(f"record {w}"))
            finally:
                ERRAND.reset(token)
    assert done == ["launch True", "record True", "launch False"]


def test_a_first_write_its_client_stopped_waiting_for_is_rolled_back(store: Store) -> None:
    """The client said how long it waits (Gpuhive-Client-Timeout): a write that would commit
    after that is rolled back, key mark included, so the client's retry carries it out once;
    a later write of a request whose first write committed is never rolled back."""
    import time

    from jupyter_gpuhive.store.errand import COMMIT_MARGIN

    keys, now = store.idempotency, utcnow()
    keys.claim("alice", "k3", "fp", now, DAY, MINUTE)
    store.db.write(lambda conn: conn.execute(text("CREATE TABLE IF NOT EXISTS t3 (n INTEGER)")))
    errand = Errand.starting(60)
    errand.on_write = lambda conn: keys.applied(conn, "alice", "k3")
    errand.client_deadline = time.monotonic() + COMMIT_MARGIN + 0.2
    errand.check()  # the client still waits when the work starts

    def slow_insert(conn: object) -> None:
        conn.execute(text("INSERT INTO t3 (n) VALUES (1)"))  # type: ignore[attr-defined]
        time.sleep(0.3)  # the commit would come after the client stopped waiting

    token = ERRAND.set(errand)
    try:
        with pytest.raises(Dropped, match="Gpuhive-Client-Timeout"):
            store.db.write(slow_insert)
        with pytest.raises(Dropped, match="Gpuhive-Client-Timeout"):
            errand.check()  # nor does more work start
    finally:
        ERRAND.reset(token)
    assert not errand.wrote
    with store.db.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM t3")).scalar() == 0
    assert keys.get("alice", "k3")["status"] is None  # type: ignore[index]

    bound = Errand.starting(60)
    bound.committed()  # its first write committed: the answer must be given
    bound.client_deadline = time.monotonic() - 1
    token = ERRAND.set(bound)
    try:
        store.db.write(lambda conn: conn.execute(text("INSERT INTO t3 (n) VALUES (2)")))
    finally:
        ERRAND.reset(token)
    with store.db.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM t3")).scalar() == 1
