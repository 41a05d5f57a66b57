"""Users and groups as the identity provider reports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Table, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..model import Identity, utcnow
from .database import Database
from .schema import user_groups, users


class Users:
    """Who has used gpuhive, with the groups they were last seen in."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._seen: dict[str, frozenset[str]] = {}

    def known(self, who: Identity) -> bool:
        """Whether this process already recorded the user with these groups (no I/O)."""
        return self._seen.get(who.name) == who.groups

    def touch(self, who: Identity) -> None:
        """Record a user and their groups; a no-op when nothing changed in this process."""
        if self.known(who):
            return

        def work(conn: Connection) -> None:
            # Several first requests of one user may race: inserts skip rows that exist.
            now = utcnow()
            insert = insert_ignoring_duplicates(conn)
            conn.execute(insert(users).values(name=who.name, first_seen_at=now, last_seen_at=now))
            conn.execute(update(users).where(users.c.name == who.name).values(last_seen_at=now))
            conn.execute(
                delete(user_groups).where(
                    user_groups.c.user_name == who.name,
                    user_groups.c.group_name.not_in(sorted(who.groups)),
                )
            )
            if who.groups:
                conn.execute(
                    insert(user_groups),
                    [{"user_name": who.name, "group_name": g} for g in sorted(who.groups)],
                )

        self.db.write(work)
        self._seen[who.name] = who.groups

    def all(self) -> dict[str, list[str]]:
        """Every known user with their groups."""
        with self.db.read() as conn:
            names = conn.execute(select(users.c.name).order_by(users.c.name)).scalars().all()
            pairs = conn.execute(select(user_groups)).all()
        out: dict[str, list[str]] = {name: [] for name in names}
        for row in pairs:
            out.setdefault(row.user_name, []).append(row.group_name)
        return {name: sorted(groups) for name, groups in out.items()}

    def groups_of(self, name: str) -> frozenset[str]:
        """The groups a user was last seen in (empty if never seen)."""
        if name in self._seen:
            return self._seen[name]
        with self.db.read() as conn:
            rows = conn.execute(
                select(user_groups.c.group_name).where(user_groups.c.user_name == name)
            ).scalars()
            return frozenset(rows)


def insert_ignoring_duplicates(conn: Connection) -> Callable[[Table], Any]:
    """INSERT … ON CONFLICT DO NOTHING for the connection's dialect."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite

    def make(table: Table) -> Any:
        return dialect.insert(table).on_conflict_do_nothing()

    return make
