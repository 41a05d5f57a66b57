"""Host group settings stored (migration 0025): each group's limits and no-show times."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from ..model.hostgroups import HostGroupSettings, NoShowTimes
from ..model.limits import Limits
from .database import Database
from .schema import host_group_settings

_s = host_group_settings


def _settings(row: Any) -> HostGroupSettings:
    limits = Limits.parse(json.loads(row.limits)) if row.limits else Limits()
    noshow = NoShowTimes.of_seconds(row.noshow_after_s, row.noshow_release_after_s)
    return HostGroupSettings(row.group_name, limits, noshow, row.updated_by, row.updated_at)


def read_group_limits(conn: Connection) -> dict[str, Limits]:
    """The limits each host group set for its hosts (a booking's check, in its transaction)."""
    rows = conn.execute(select(_s.c.group_name, _s.c.limits).where(_s.c.limits.is_not(None)))
    return {name: Limits.parse(json.loads(spec)) for name, spec in rows}


class HostGroupStore:
    """Each host group's settings: read, and changed one part at a time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def all(self) -> dict[str, HostGroupSettings]:
        with self.db.read() as conn:
            return {row.group_name: _settings(row) for row in conn.execute(select(_s))}

    def get(self, group: str) -> HostGroupSettings:
        with self.db.read() as conn:
            row = conn.execute(select(_s).where(_s.c.group_name == group)).first()
        return HostGroupSettings(group) if row is None else _settings(row)

    def put(self, found: HostGroupSettings, by: str, at: datetime) -> HostGroupSettings:
        """Store a group's settings whole (none left: the row goes)."""
        after, release_after = found.noshow.seconds()
        values = {
            "limits": None if found.limits.empty else json.dumps(found.limits.to_json()),
            "noshow_after_s": after,
            "noshow_release_after_s": release_after,
            "updated_by": by,
            "updated_at": at,
        }

        def work(conn: Connection) -> None:
            if found.limits.empty and found.noshow.empty:
                conn.execute(delete(_s).where(_s.c.group_name == found.group))
                return
            insert_ = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            statement = insert_(_s).values(group_name=found.group, **values)
            conn.execute(statement.on_conflict_do_update(index_elements=["group_name"],
                                                         set_=values))  # fmt: skip

        self.db.write(work)
        return HostGroupSettings(found.group, found.limits, found.noshow, by, at)
