"""Leader election among service replicas: one PostgreSQL advisory lock, one leader.

The lock lives on a dedicated connection outside the pool (a pooled connection would keep
the lock when returned). When the leader dies its session ends, the lock is released, and
another replica takes it on its next try. SQLite stores have a single process: always leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.engine import make_url

log = logging.getLogger(__name__)

LOCK_KEY = 0x6770_7568_6976_6501 & 0x7FFF_FFFF_FFFF_FFFF  # "gpuhive" + 1, as a bigint


class Leadership:
    """Tries to hold the advisory lock; calls `on_gain` / `on_loss` as leadership changes."""

    def __init__(
        self,
        db_url: str,
        on_gain: Callable[[], Awaitable[None]],
        on_loss: Callable[[], Awaitable[None]],
        interval: float = 1.0,
        key: int = LOCK_KEY,
    ) -> None:
        self.url = make_url(db_url)
        self.on_gain, self.on_loss = on_gain, on_loss
        self.interval = interval
        self.key = key
        self.leader = False
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def single_process(self) -> bool:
        return self.url.get_backend_name() != "postgresql"

    def _connect(self) -> Any:
        import psycopg

        url = self.url.set(drivername="postgresql")
        return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)

    def _try_lock(self) -> bool:
        """Take (or confirm we still hold) the lock; False when another replica holds it."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            if self.leader:
                self._conn.execute("SELECT 1")
                return True
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
            return bool(row and row[0])
        except Exception as error:
            log.warning("gpuhive: leader lock check failed: %s", error)
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return False

    async def holds(self) -> bool:
        """Check the lock now (call before a side effect such as a kill or a launch)."""
        if self.single_process:
            return True
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self._try_lock))

    async def _loop(self) -> None:
        while True:
            held = await self.holds()
            if held and not self.leader:
                self.leader = True
                log.info("gpuhive: this replica is now the leader")
                await self.on_gain()
            elif not held and self.leader:
                self.leader = False
                log.warning("gpuhive: leadership lost; background loops stop")
                await self.on_loss()
            if self.single_process:
                return
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="gpuhive-leader")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.leader:
            self.leader = False
            await self.on_loss()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
