"""Engines, transactions and migrations for SQLite and PostgreSQL.

SQLite: every write transaction is `BEGIN IMMEDIATE` (deferred transactions that upgrade
from read to write fail with "database is locked" under concurrency), WAL, busy timeout.
PostgreSQL: deadlocks and serialization failures are retried with jitter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError

from ..files import UnsafePath, private_file
from ..model.core import utcnow
from ..model.errand import Claim, Errand, KeyAnswered, KeyTerms

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_SQLSTATES = {"40P01", "40001"}  # deadlock detected, serialization failure
EXCLUSION_VIOLATION = "23P01"
MIGRATIONS = Path(__file__).with_name("migrations")
# PostgreSQL advisory locks (one key each) that replicas take turns under, in a transaction:
SCHEMA_LOCK = 0x67687363  # 'ghsc': migrating the schema
INVENTORY_LOCK = 0x67686976  # 'ghiv': writing hosts and GPUs (each replica syncs at start)


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error, when the driver reports one."""
    orig = getattr(error, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)


def inserted_id(result: Any) -> int:
    """The id an INSERT made."""
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def _create_private(path: Path) -> None:
    """Create a new SQLite file as 0600 before SQLite does (under the umask): it holds webhook
    secrets and jobs' env values. SQLite gives its -wal and -shm files the same mode. A file
    there already is used only when it is this account's and 0600, in a folder nobody else
    may write (who could plant the -wal file, or swap the store): otherwise refused, saying why."""
    try:
        private_file(path)
    except UnsafePath as error:
        raise UnsafePath(f"The SQLite store cannot be used. {error}") from None


# A pooled PostgreSQL connection idle this long is pinged before it is used again (a server
# restart or a firewall may have ended it); one in steady use is not: a ping per checkout
# was a round trip more per transaction.
PING_AFTER_IDLE = 5.0


def _postgres_engine(url: str) -> Engine:
    engine = create_engine(url, pool_size=10, max_overflow=20)
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _idle_from(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE:
            return  # new, or in use moments ago
        try:
            alive = dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise DisconnectionError(f"a pooled connection is gone: {error}") from error
        if not alive:
            raise DisconnectionError("a pooled connection did not answer its ping")

    return engine


def _sqlite_engine(url: str, immediate: bool) -> Engine:
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        pool_size=8,
        max_overflow=8,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        if immediate:  # writers: the Checkpointer does it, outside the writers' lock
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _broken_foreign_keys(connection: Connection) -> bool:
    """Whether any row of a SQLite database points at a row that is not there."""
    return connection.exec_driver_sql("PRAGMA foreign_key_check").first() is not None


class Checkpointer:
    """Copies SQLite's write-ahead log into the database from a thread of its own.

    SQLite does it by default in the commit that fills the log past 1,000 pages, with two
    fsyncs; that commit's writer still holds the writers' lock (`Database._turns`) then, so
    every writer queued behind it waited too (benchmarks/integrations.py: p99 tails of
    40 ms at 100 bookings/s). Here writers only count; a PASSIVE checkpoint (it never waits
    for readers or writers, nor makes them wait) runs every EVERY commits or once a second
    after any. The thread starts with the first write of each process (a forked child
    starts its own) and ends with `stop`.
    """

    EVERY = 200
    PERIOD = 1.0

    def __init__(self, path: str) -> None:
        self.path = path
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stopped = False

    def wrote(self) -> None:
        """One more commit in the log."""
        with self._lock:
            if self._stopped:
                return
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="gpuhive-checkpoint", daemon=True
                )
                self._thread.start()
            self._pending += 1
            if self._pending >= self.EVERY:
                self._wake.set()

    def stop(self) -> None:
        """End the thread after one last checkpoint of what is pending (a later write
        starts a new one)."""
        with self._lock:
            self._stopped = True
            thread = self._thread if self._pid == os.getpid() else None
        self._wake.set()
        if thread is not None:
            thread.join(timeout=10)
        with self._lock:
            self._thread, self._stopped = None, False

    def _run(self) -> None:
        connection = sqlite3.connect(self.path, check_same_thread=False)
        try:
            while True:
                self._wake.wait(self.PERIOD)
                self._wake.clear()
                with self._lock:
                    pending, self._pending = self._pending, 0
                    stopped = self._stopped
                if pending:
                    try:
                        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    except sqlite3.Error as error:
                        log.warning("gpuhive: WAL checkpoint of %s failed: %s", self.path, error)
                if stopped:
                    return
        finally:
            connection.close()


class Database:
    """The store's connection to one database: reads, serialized writes, migrations."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.url = url
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if not parsed.database or parsed.database == ":memory:":
                raise ValueError("gpuhive needs a SQLite file, not an in-memory database")
            _create_private(Path(parsed.database).expanduser())
            self.reader = _sqlite_engine(url, immediate=False)
            self.writer = _sqlite_engine(url, immediate=True)
            # Writers of this process take turns here before BEGIN IMMEDIATE: a waiter wakes
            # the moment the lock is free. Left to SQLite, it polls with sleeps of 1, 2, 5, 10,
            # 15, 20, 25 ms..., so a few queued writers waited tens of ms for a lock held for
            # one (benchmarks/fairshare.py, integrations.py). Other processes still meet the
            # busy timeout.
            self._turns: contextlib.AbstractContextManager[Any] = threading.RLock()
            self._checkpoints: Checkpointer | None = Checkpointer(
                str(Path(parsed.database).expanduser())
            )
        else:
            self.reader = self.writer = _postgres_engine(url)
            self._turns = contextlib.nullcontext()  # row locks, not one lock for everything
            self._checkpoints = None
        self._thread = threading.local()  # per thread: its committed writes (`commits`)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reading: each statement sees what was committed before it began
        (`snapshot` for one view of several statements).

        PostgreSQL: in autocommit, each statement its own transaction. That is what READ
        COMMITTED gives a transaction's statements anyway, without its BEGIN and COMMIT:
        two round trips of the three or four a small read took, and under load each round
        trip waits for the server's process to be scheduled."""
        if self.dialect != "postgresql":
            with self.reader.begin() as connection:
                yield connection
            return
        with self.reader.connect() as plain:
            yield plain.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A connection for reading in which every statement sees the same committed state.

        PostgreSQL: a REPEATABLE READ, READ ONLY transaction (READ COMMITTED would let rows
        another replica commits between two statements into the second only: GPUs of a
        host the first did not return). SQLite: any read transaction already is one."""
        if self.dialect != "postgresql":
            with self.read() as connection:
                yield connection
            return
        with self.reader.connect() as plain:
            connection = plain.execution_options(isolation_level="REPEATABLE READ")
            with connection.begin():
                connection.execute(text("SET TRANSACTION READ ONLY"))
                yield connection

    def write(
        self, work: Callable[[Connection], T], attempts: int = 6, *, errand: Errand | None = None
    ) -> T:
        """Run `work` in one write transaction, retrying transient concurrency failures.

        `errand`: the API request this write is part of, handed along its path. Its
        Idempotency-Key is taken first in the transaction (until a write took it), no commit
        comes before the Hub confirmed its identity, and its first write rolls back when its
        client stopped waiting (model/errand.py)."""
        if errand is not None and self.dialect != "postgresql":
            # SQLite's writers take turns: none waits for the Hub's confirmation in its turn
            errand.confirmed()
        for attempt in range(1, attempts + 1):
            try:
                keyed = errand is not None and not errand.unkeyed()
                with self._turns, self.writer.begin() as connection:
                    if keyed:
                        assert errand is not None
                        self._take_key(connection, errand)  # its Idempotency-Key, first
                    done = work(connection)
                    if errand is not None:
                        errand.writing(connection)
                self._committed()
                if errand is not None:
                    errand.committed(took_key=keyed)
                return done
            except (OperationalError, DBAPIError) as error:
                transient = sqlstate(error) in RETRYABLE_SQLSTATES or (
                    self.dialect == "sqlite" and "database is locked" in str(error)
                )
                if not transient or attempt == attempts:
                    raise
                log.debug("retrying write after %s (attempt %d)", sqlstate(error), attempt)
                time.sleep(random.uniform(0.002, 0.02) * attempt)
        raise AssertionError("unreachable")

    def commits(self) -> int:
        """How many writes the calling thread has committed (an API request's work counts
        them: one more and the request has written, model/errand.py `in_executor`)."""
        return getattr(self._thread, "commits", 0)  # type: ignore[no-any-return]

    def _committed(self) -> None:
        self._thread.commits = self.commits() + 1
        if self._checkpoints is not None:
            self._checkpoints.wrote()

    # Set by Store: takes a request's key in a transaction (store/idempotency.py `take`).
    take_key: Callable[[Connection, KeyTerms, datetime], Claim] | None = None

    def _take_key(self, connection: Connection, errand: Errand) -> None:
        """Take the request's Idempotency-Key first in its write, or answer from the key's
        row instead (KeyAnswered: this transaction rolls back)."""
        assert self.take_key is not None
        assert errand.key is not None
        claim = self.take_key(connection, errand.key, utcnow())
        if claim.outcome != "claimed":
            raise KeyAnswered(claim)

    def write_one(self, statement: Callable[[Connection], T], attempts: int = 6) -> T:
        """Run one statement as a transaction of its own, outside any request's errand (the
        bookkeeping of Idempotency-Keys; it takes none): PostgreSQL runs it in autocommit, one
        round trip where BEGIN, the statement and COMMIT took three; SQLite as `write`."""
        if self.dialect != "postgresql":
            return self.write(statement, attempts)
        for attempt in range(1, attempts + 1):
            try:
                with self.writer.connect() as plain:
                    done = statement(plain.execution_options(isolation_level="AUTOCOMMIT"))
                self._thread.commits = self.commits() + 1
                return done
            except (OperationalError, DBAPIError) as error:
                if sqlstate(error) not in RETRYABLE_SQLSTATES or attempt == attempts:
                    raise
                time.sleep(random.uniform(0.002, 0.02) * attempt)
        raise AssertionError("unreachable")

    def take_turns(self, conn: Connection, key: int) -> None:
        """PostgreSQL: wait for the transaction lock `key`, so that replicas doing the same
        check-then-insert at once (each syncs the inventory at start) do it one after the
        other. SQLite needs none: its writers begin IMMEDIATE, one at a time."""
        if self.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to an Alembic revision (the newest by default), in one transaction.

        SQLite: foreign keys are off meanwhile (a table rebuild would otherwise cascade its
        DROP to the rows that point at it) and checked before the commit, as SQLite's own
        procedure for schema changes does (PRAGMA foreign_keys only works between transactions).

        Replicas started together (`systemctl start gpuhive@1 gpuhive@2`) migrate at once: on
        PostgreSQL each waits for a transaction-scoped advisory lock before it reads the
        revision, so the first brings the schema up and the others find it done. (SQLite's
        writer begins IMMEDIATE: the database's own lock makes them take turns.)
        """
        from alembic import command  # here: the webhook courier process imports this module
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        sqlite = self.dialect == "sqlite"
        with self.writer.connect() as connection:
            driver: Any = connection.connection.driver_connection
            if sqlite:
                driver.execute("PRAGMA foreign_keys=OFF")
            try:
                with connection.begin():
                    self.take_turns(connection, SCHEMA_LOCK)
                    config.attributes["connection"] = connection
                    before = MigrationContext.configure(connection).get_current_revision()
                    command.upgrade(config, revision)
                    after = MigrationContext.configure(connection).get_current_revision()
                    if sqlite and after != before and _broken_foreign_keys(connection):
                        raise RuntimeError("the migration left rows that break a foreign key")
            finally:
                if sqlite:
                    driver.execute("PRAGMA foreign_keys=ON")

    def dispose(self) -> None:
        """Close all pooled connections (SQLite: after a last checkpoint)."""
        if self._checkpoints is not None:
            self._checkpoints.stop()
        self.reader.dispose()
        if self.writer is not self.reader:
            self.writer.dispose()
