"""Move a store to another database: personal mode (SQLite) → team mode (PostgreSQL).

Run by `jupyter gpuhive migrate --from sqlite:///…/gpuhive.sqlite --to postgresql+psycopg://…`

1. The source is read from a snapshot (SQLite's online backup), brought to the newest
   schema, so the source file is never changed and may even be in use.
2. The target is migrated to the newest schema and must hold no reservations, rules,
   jobs or users yet (a fresh database, or one a service has only started on).
3. In one transaction on the target every table is emptied and refilled with the
   source's rows, keeping ids (reservations, GPUs, jobs are referred to by id), and
   PostgreSQL's id sequences are moved past every id the source ever handed out (SQLite's
   AUTOINCREMENT counters included), so an id deleted there is never handed out again.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Table, delete, func, insert, select, text
from sqlalchemy.engine import make_url

from . import Store
from .schema import metadata

BATCH = 1000
# Tables that hold what people did; a target with rows in any of them is not overwritten.
USER_DATA = ("reservations", "rules", "jobs", "users")


class MigrationError(Exception):
    """The migration cannot be done; the message says why and what to do."""


def normalize_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL URLs given without a driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _snapshot(source: str, into: Path) -> str:
    """A consistent copy of a SQLite store (the online backup API), as a URL."""
    parsed = make_url(source)
    if parsed.get_backend_name() != "sqlite":
        return source
    path = Path(parsed.database or "").expanduser()
    if not path.is_file():
        raise MigrationError(f"No SQLite store at {path}.")
    copy = into / "source.sqlite"
    copy.touch(mode=0o600)  # private like every store gpuhive opens (files.py), in a 0700 folder
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dst = sqlite3.connect(copy)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return f"sqlite:///{copy}"


def _count(conn: Connection, table: Table) -> int:
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _handed_out(conn: Connection) -> dict[str, int]:
    """Per table, the highest id a SQLite store ever handed out (its AUTOINCREMENT counter)."""
    if conn.dialect.name != "sqlite":
        return {}
    known = conn.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'")
    ).first()
    if known is None:
        return {}
    return {str(n): int(s) for n, s in conn.execute(text("SELECT name, seq FROM sqlite_sequence"))}


def _reset_sequences(conn: Connection, tables: list[Table], handed_out: dict[str, int]) -> None:
    for table in tables:
        if "id" not in table.c or not table.c.id.primary_key:
            continue
        conn.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                "GREATEST(COALESCE(MAX(id), 0), :seen, 1), "
                f"GREATEST(COALESCE(MAX(id), 0), :seen) > 0) FROM {table.name}"
            ),
            {"seen": handed_out.get(table.name, 0)},
        )


def migrate(source: str, target: str, *, say: Callable[[str], Any] = print) -> dict[str, int]:
    """Copy every row of `source` into `target`; returns rows copied per table."""
    source, target = normalize_url(source), normalize_url(target)
    if make_url(source) == make_url(target):
        raise MigrationError("--from and --to name the same database.")
    tmp = Path(tempfile.mkdtemp(prefix="gpuhive-migrate-"))
    try:
        snapshot = _snapshot(source, tmp)
        src = Store(snapshot)
        dst = Store(target)
        try:
            say(f"Reading {make_url(source).render_as_string(hide_password=True)}")
            src.db.migrate()
            say(f"Preparing {make_url(target).render_as_string(hide_password=True)}")
            dst.db.migrate()
            return _copy(src, dst, say)
        finally:
            src.close()
            dst.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy(src: Store, dst: Store, say: Callable[[str], Any]) -> dict[str, int]:
    tables = list(metadata.sorted_tables)  # parents before children
    with dst.db.writer.begin() as out:
        busy = {
            name: n
            for name in USER_DATA
            if name in metadata.tables and (n := _count(out, metadata.tables[name]))
        }
        if busy:
            found = ", ".join(f"{n} {name}" for name, n in busy.items())
            raise MigrationError(
                f"The target already holds data ({found}); migrate into a new, empty database."
            )
        for table in reversed(tables):
            out.execute(delete(table))
        copied: dict[str, int] = {}
        with src.db.read() as inp:
            handed_out = _handed_out(inp)
            for table in tables:
                rows = 0
                result = inp.execute(select(table)).mappings()
                while batch := result.fetchmany(BATCH):
                    out.execute(insert(table), [dict(row) for row in batch])
                    rows += len(batch)
                copied[table.name] = rows
        if dst.db.dialect == "postgresql":
            _reset_sequences(out, tables, handed_out)
    for name, rows in copied.items():
        if rows:
            say(f"  {name}: {rows}")
    return copied
