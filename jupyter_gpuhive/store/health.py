"""GPU health and drains: one row per GPU that was ever not ok or drained, cached briefly."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping

from sqlalchemy import Connection, delete, insert, select, update

from ..model import utcnow
from ..model.health import GpuCondition
from .database import Database
from .schema import gpu_health

CACHE_SECONDS = 0.5  # other servers (followers) see the leader's judgement within this


class HealthStore:
    """Read every GPU's condition (cached), record the monitor's judgement, drain and undrain."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._cache: tuple[float, dict[int, GpuCondition]] | None = None

    def all(self) -> dict[int, GpuCondition]:
        """{gpu_id: condition} of every GPU with a row (a GPU without one is ok, not drained)."""
        cached = self.cached()
        if cached is not None:
            return cached
        with self.db.read() as conn:
            rows = conn.execute(select(gpu_health)).all()
        found = {
            row.gpu_id: GpuCondition(
                row.gpu_id, row.state, tuple(json.loads(row.reasons)), row.since,
                bool(row.drained), row.drained_by, row.drain_reason,
            )
            for row in rows
        }  # fmt: skip
        with self._lock:
            self._cache = (time.monotonic(), found)
        return found

    def cached(self) -> dict[int, GpuCondition] | None:
        """`all()` when its cached answer is still fresh, else None (then read `all()`)."""
        with self._lock:
            cached = self._cache
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        return None

    def _forget(self) -> None:
        with self._lock:
            self._cache = None

    def record(self, judged: Mapping[int, tuple[str, tuple[str, ...]]]) -> dict[int, GpuCondition]:
        """Store the states that changed; returns {gpu_id: new condition} of those."""
        known = self.all()
        changed = {
            gpu_id: found
            for gpu_id, found in judged.items()
            if gpu_id in known and (known[gpu_id].state, known[gpu_id].reasons) != found
        }
        changed.update({g: f for g, f in judged.items() if g not in known and f[0] != "ok"})
        if not changed:
            return {}
        now = utcnow()

        def work(conn: Connection) -> None:
            for gpu_id, (state, reasons) in changed.items():
                values = {"state": state, "reasons": json.dumps(list(reasons)), "since": now}
                if gpu_id in known:
                    conn.execute(
                        update(gpu_health).where(gpu_health.c.gpu_id == gpu_id).values(**values)
                    )
                else:
                    conn.execute(insert(gpu_health).values(gpu_id=gpu_id, drained=False, **values))
            conn.execute(
                delete(gpu_health).where(
                    gpu_health.c.state == "ok", gpu_health.c.drained.is_(False)
                )
            )

        self.db.write(work)
        self._forget()
        now_all = self.all()
        return {g: now_all.get(g, GpuCondition(g, "ok", (), now)) for g in changed}

    def drain(self, gpu_id: int, drained: bool, by: str, reason: str | None) -> GpuCondition:
        """Drain a GPU for maintenance (no new bookings or jobs), or end its drain."""
        now = utcnow()
        values = {"drained": drained, "drained_by": by if drained else None,
                  "drain_reason": reason if drained else None}  # fmt: skip

        def work(conn: Connection) -> None:
            found = conn.execute(
                select(gpu_health.c.gpu_id).where(gpu_health.c.gpu_id == gpu_id)
            ).first()
            if found is None:
                conn.execute(
                    insert(gpu_health).values(
                        gpu_id=gpu_id, state="ok", reasons="[]", since=now, **values
                    )
                )
            else:
                conn.execute(
                    update(gpu_health).where(gpu_health.c.gpu_id == gpu_id).values(**values)
                )

        self.db.write(work)
        self._forget()
        return self.all().get(gpu_id, GpuCondition(gpu_id, since=now))

    def unbookable(self) -> dict[int, GpuCondition]:
        """The conditions of GPUs that take no new bookings (failed or drained)."""
        return {g: c for g, c in self.all().items() if not c.bookable}
