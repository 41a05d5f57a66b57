"""Published sweeps: the leader writes each sweep's live state, the other replicas read it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, func, insert, select

from .database import Database, inserted_id
from .schema import live_sweeps


class LiveSweeps:
    """The newest sweeps as the leader published them (opaque bodies, oldest first)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def publish(self, at: datetime, body: bytes, keep: int) -> int:
        """Add one sweep and drop all but the newest `keep`; the new row's id."""

        def work(conn: Connection) -> int:
            new = inserted_id(conn.execute(insert(live_sweeps).values(at=at, body=body)))
            conn.execute(delete(live_sweeps).where(live_sweeps.c.id <= new - keep))
            return new

        return self.db.write(work)

    def newest(self) -> int:
        """The id of the newest published sweep (0: none); one index lookup."""
        with self.db.read() as conn:
            return int(conn.execute(select(func.max(live_sweeps.c.id))).scalar() or 0)

    def after(self, last: int, limit: int) -> list[tuple[int, bytes]]:
        """(id, body) of the sweeps published after id `last`, at most the newest `limit`,
        oldest first."""
        query = (
            select(live_sweeps.c.id, live_sweeps.c.body)
            .where(live_sweeps.c.id > last)
            .order_by(live_sweeps.c.id.desc())
            .limit(limit)
        )
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return [(int(row.id), bytes(row.body)) for row in reversed(rows)]
