"""Engines, transactions and migrations for SQLite and PostgreSQL.

SQLite: every write transaction is `BEGIN IMMEDIATE` (deferred transactions that upgrade
from read to write fail with "database is locked" under concurrency), WAL, busy timeout.
PostgreSQL: deadlocks and serialization failures are retried with jitter.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_SQLSTATES = {"40P01", "40001"}  # deadlock detected, serialization failure
EXCLUSION_VIOLATION = "23P01"
MIGRATIONS = Path(__file__).with_name("migrations")


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error, when the driver reports one."""
    orig = getattr(error, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)


def inserted_id(result: Any) -> int:
    """The id an INSERT made."""
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


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
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _broken_foreign_keys(connection: Connection) -> bool:
    """Whether any row of a SQLite database points at a row that is not there."""
    return connection.exec_driver_sql("PRAGMA foreign_key_check").first() is not None


class Database:
    """The store's connection to one database: reads, serialized writes, migrations."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.url = url
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if not parsed.database or parsed.database == ":memory:":
                raise ValueError("gpuhive needs a SQLite file, not an in-memory database")
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.reader = _sqlite_engine(url, immediate=False)
            self.writer = _sqlite_engine(url, immediate=True)
            # Writers of this process take turns here before BEGIN IMMEDIATE: a waiter wakes
            # the moment the lock is free. Left to SQLite, it polls with sleeps of 1, 2, 5, 10,
            # 15, 20, 25 ms..., so a few queued writers waited tens of ms for a lock held for
            # one (benchmarks/fairshare.py, integrations.py). Other processes still meet the
            # busy timeout.
            self._turns: contextlib.AbstractContextManager[Any] = threading.RLock()
        else:
            self.reader = self.writer = create_engine(
                url, pool_size=10, max_overflow=20, pool_pre_ping=True
            )
            self._turns = contextlib.nullcontext()  # row locks, not one lock for everything

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reading (a consistent snapshot inside one transaction)."""
        with self.reader.begin() as connection:
            yield connection

    def write(self, work: Callable[[Connection], T], attempts: int = 6) -> T:
        """Run `work` in one write transaction, retrying transient concurrency failures."""
        for attempt in range(1, attempts + 1):
            try:
                with self._turns, self.writer.begin() as connection:
                    return work(connection)
            except (OperationalError, DBAPIError) as error:
                transient = sqlstate(error) in RETRYABLE_SQLSTATES or (
                    self.dialect == "sqlite" and "database is locked" in str(error)
                )
                if not transient or attempt == attempts:
                    raise
                log.debug("retrying write after %s (attempt %d)", sqlstate(error), attempt)
                time.sleep(random.uniform(0.002, 0.02) * attempt)
        raise AssertionError("unreachable")

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to an Alembic revision (the newest by default), in one transaction.

        SQLite: foreign keys are off meanwhile (a table rebuild would otherwise cascade its
        DROP to the rows that point at it) and checked before the commit, as SQLite's own
        procedure for schema changes does (PRAGMA foreign_keys only works between transactions).
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
        """Close all pooled connections."""
        self.reader.dispose()
        if self.writer is not self.reader:
            self.writer.dispose()
