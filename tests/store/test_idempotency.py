"""Idempotency keys' rows: taken in a request's first write, answers, refusals, races, lost
and earlier-scheme claims, expiry."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, text

from jupyter_gpuhive.errors import Unconfirmed
from jupyter_gpuhive.model import utcnow
from jupyter_gpuhive.model.errand import ERRAND, Dropped, Errand
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.idempotency import KeyAnswered, KeyTerms
from jupyter_gpuhive.store.schema import UTCDateTime

DAY, MINUTE = timedelta(hours=24), timedelta(minutes=1)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url).open()
    yield opened
    opened.close()


def test_a_write_runs_a_requests_errand_only_where_it_is_handed_one(store: Store) -> None:
    """The store reads no request state from the context: a write runs an errand's checks
    (its key, the Hub's confirmation, its client's patience) only where its path hands it
    the errand. Key bookkeeping (one statement on its own; PostgreSQL: autocommit) is handed
    none, so it waits for no Hub even while its request's own writes must."""
    unconfirmed = Errand.starting(60)
    unconfirmed.gate = concurrent.futures.Future()
    unconfirmed.gate.set_result(False)  # the Hub did not confirm this request's identity
    unconfirmed.key = terms("k10")
    token = ERRAND.set(unconfirmed)  # the request's scheduling context
    try:
        store.idempotency.refusal(terms("k9"), utcnow(), 409, "{}", None)
        store.db.write(lambda conn: conn.execute(text("CREATE TABLE IF NOT EXISTS t9 (n INT)")))
        with pytest.raises(Unconfirmed):
            store.db.write(lambda conn: conn.execute(text("INSERT INTO t9 VALUES (1)")),
                           errand=unconfirmed)  # fmt: skip
    finally:
        ERRAND.reset(token)
    assert store.idempotency.get("alice", "k9")["status"] == 409  # type: ignore[index]
    assert store.idempotency.get("alice", "k10") is None  # rolled back with the write
    with store.db.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM t9")).scalar() == 0
    assert not unconfirmed.wrote


def test_no_write_handed_an_errand_commits_before_the_hub_confirms(store: Store) -> None:
    """A request that runs on the Hub's last answer (team mode, `confirms_identity_late`)
    commits its write only once the Hub confirmed it: the write waits at its commit (SQLite:
    before its turn), its key and its rows commit together afterwards; unconfirmed, neither
    does."""
    store.db.write(lambda conn: conn.execute(text("CREATE TABLE IF NOT EXISTS t8 (n INT)")))
    errand = Errand.starting(60)
    errand.key = terms("k8")
    errand.gate = concurrent.futures.Future()
    seen: list[int] = []

    def confirm_later() -> None:
        time.sleep(0.3)
        with store.db.read() as conn:  # nothing committed while the Hub is being asked
            seen.append(int(conn.execute(text("SELECT count(*) FROM t8")).scalar() or 0))
        assert errand.gate is not None
        errand.gate.set_result(True)

    hub = threading.Thread(target=confirm_later)
    hub.start()
    store.db.write(lambda conn: conn.execute(text("INSERT INTO t8 VALUES (1)")), errand=errand)
    hub.join()
    assert seen == [0] and errand.wrote and errand.took_key
    assert store.idempotency.get("alice", "k8")["status"] == 0  # type: ignore[index]


def test_a_keyed_write_takes_its_key_after_another_write_of_its_request(store: Store) -> None:
    """A request that already committed another write (remembering a new user, counted by
    the executor) still takes its key in the write it hands its errand: the booking's own."""
    from concurrent.futures import ThreadPoolExecutor

    from jupyter_gpuhive.model.errand import in_executor

    store.db.write(lambda conn: conn.execute(text("CREATE TABLE IF NOT EXISTS t7 (n INT)")))
    errand = Errand.starting(60)
    errand.key = terms("k7")

    async def request() -> None:
        with ThreadPoolExecutor(1) as pool:
            token = ERRAND.set(errand)
            try:
                first = lambda: store.db.write(  # noqa: E731
                    lambda conn: conn.execute(text("INSERT INTO t7 VALUES (1)"))
                )
                await in_executor(pool, first, store.db.commits)
                assert errand.wrote and not errand.took_key  # counted, took no key
                assert store.idempotency.get("alice", "k7") is None
                errand.closed = True  # the client went: a request that wrote is not dropped
                booking = lambda: store.db.write(  # noqa: E731
                    lambda conn: conn.execute(text("INSERT INTO t7 VALUES (2)")), errand=errand
                )
                await in_executor(pool, booking, store.db.commits)
            finally:
                ERRAND.reset(token)

    asyncio.run(request())
    assert errand.took_key
    assert store.idempotency.get("alice", "k7")["status"] == 0  # type: ignore[index]


def terms(key: str, fingerprint: str = "fp", owner: str = "alice") -> KeyTerms:
    return KeyTerms(owner, key, fingerprint, DAY, MINUTE)


def test_the_first_use_takes_the_key_and_a_retry_gets_its_answer(store: Store) -> None:
    keys, now = store.idempotency, utcnow()
    assert keys.claim(terms("k1"), now).outcome == "claimed"
    assert keys.claim(terms("k1"), now).outcome == "busy"  # taken, its answer not stored yet
    assert keys.claim(terms("k1", "other"), now).outcome == "mismatch"
    assert keys.claim(terms("k1", "other", owner="bob"), now).outcome == "claimed"  # per user
    keys.answer("alice", "k1", 201, '{"id": 7}', "/api/reservations/7")
    replay = keys.claim(terms("k1"), now)
    assert (replay.outcome, replay.status, replay.body, replay.location) == (
        "replay", 201, '{"id": 7}', "/api/reservations/7",
    )  # fmt: skip


def test_a_key_is_taken_first_in_the_requests_first_write_and_commits_with_it(
    store: Store,
) -> None:
    """The store takes the key the errand carries before the write's work: a failed write
    takes nothing (a retry runs afresh); a committed one holds the key, and its next writes
    leave it alone; a second request with the key finds it before its work runs (and rolls
    back)."""
    keys, now = store.idempotency, utcnow()
    store.db.write(lambda conn: conn.execute(text("CREATE TABLE IF NOT EXISTS t2 (n INTEGER)")))
    ran: list[int] = []

    def insert(n: int) -> Any:
        def work(conn: Any) -> None:
            ran.append(n)
            conn.execute(text(f"INSERT INTO t2 (n) VALUES ({n})"))

        return work

    def bound(key: str) -> Errand:
        errand = Errand.starting(60)
        errand.key = terms(key)
        return errand

    errand = bound("k2")
    with pytest.raises(RuntimeError):  # the write fails: neither it nor the key commits
        store.db.write(lambda conn: _fail(conn), errand=errand)
    assert keys.get("alice", "k2") is None and not errand.wrote
    store.db.write(insert(1), errand=errand)
    store.db.write(insert(2), errand=errand)  # a later write of the request: the key is its own
    assert errand.wrote and errand.took_key
    assert keys.get("alice", "k2")["status"] == 0  # type: ignore[index]  # APPLIED

    retry = bound("k2")
    with pytest.raises(KeyAnswered) as found:
        store.db.write(insert(3), errand=retry)
    assert found.value.claim.outcome == "busy" and ran == [1, 2]  # its work never ran
    with store.db.read() as conn:
        assert conn.execute(text("SELECT n FROM t2 ORDER BY n")).scalars().all() == [1, 2]
    later = now + 2 * MINUTE  # written, the answer never stored: lost once stale
    assert keys.claim(terms("k2"), later).outcome == "lost"


def _fail(conn: object) -> None:
    raise RuntimeError("the write fails")


def test_refusals_are_kept_unless_a_retry_wrote_and_keys_expire(store: Store) -> None:
    keys, now = store.idempotency, utcnow()
    keys.refusal(terms("k3"), now, 409, '{"message": "taken"}', None)
    again = keys.claim(terms("k3"), now)
    assert (again.outcome, again.status) == ("replay", 409)
    assert keys.claim(terms("k3", "new"), now + DAY / 2).outcome == "mismatch"
    assert keys.claim(terms("k3", "new"), now + 2 * DAY).outcome == "claimed"  # expired
    # a retry wrote before the first attempt's refusal was stored: the retry's key stands
    assert keys.claim(terms("k5"), now).outcome == "claimed"
    keys.refusal(terms("k5"), now, 409, "{}", None)
    assert keys.get("alice", "k5")["status"] == 0  # type: ignore[index]
    # an earlier scheme's claim (NULL: taken before its request ran) that wrote nothing is
    # busy while young and taken over once stale
    with store.db.writer.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO idempotency_keys (owner, key, fingerprint, created_at) "
                "VALUES ('alice', 'k6', 'fp', :at)"
            ).bindparams(bindparam("at", type_=UTCDateTime)),
            {"at": now},
        )
    assert keys.claim(terms("k6"), now).outcome == "busy"
    assert keys.claim(terms("k6"), now + 2 * MINUTE).outcome == "claimed"
    # expired keys are purged
    keys.claim(terms("old"), now - 2 * DAY)
    keys._purged = 0.0  # the once-a-minute purge: due now
    keys.refusal(terms("k4"), now, 422, "{}", None)
    assert keys.get("alice", "old") is None
    keys.claim(terms("older"), now - 2 * DAY)  # and after a stored answer of a write
    keys.claim(terms("k7"), now)
    keys._purged = 0.0
    keys.answer("alice", "k7", 201, "{}", None, now - DAY)
    assert keys.get("alice", "older") is None and keys.get("alice", "k7")["status"] == 201  # type: ignore[index]


def test_concurrent_claims_of_one_key_let_one_run(store: Store) -> None:
    keys, now = store.idempotency, utcnow()
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def claim() -> None:
        start.wait()
        outcomes.append(keys.claim(terms("race"), now).outcome)

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

    from jupyter_gpuhive.model.errand import in_executor

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
    from jupyter_gpuhive.model.errand import COMMIT_MARGIN

    keys = store.idempotency
    store.db.write(lambda conn: conn.execute(text("CREATE TABLE IF NOT EXISTS t3 (n INTEGER)")))
    errand = Errand.starting(60)
    errand.key = terms("k3")
    errand.client_deadline = time.monotonic() + COMMIT_MARGIN + 0.2
    errand.check()  # the client still waits when the work starts

    def slow_insert(conn: object) -> None:
        conn.execute(text("INSERT INTO t3 (n) VALUES (1)"))  # type: ignore[attr-defined]
        time.sleep(0.3)  # the commit would come after the client stopped waiting

    with pytest.raises(Dropped, match="Gpuhive-Client-Timeout"):
        store.db.write(slow_insert, errand=errand)
    with pytest.raises(Dropped, match="Gpuhive-Client-Timeout"):
        errand.check()  # nor does more work start
    assert not errand.wrote
    with store.db.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM t3")).scalar() == 0
    assert keys.get("alice", "k3") is None  # rolled back with the write: the retry takes it

    bound = Errand.starting(60)
    bound.committed()  # its first write committed: the answer must be given
    bound.client_deadline = time.monotonic() - 1
    store.db.write(lambda conn: conn.execute(text("INSERT INTO t3 (n) VALUES (2)")), errand=bound)
    with store.db.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM t3")).scalar() == 1
