"""Each GPU's current and next holder for `GET hosts`, read once and shared by all requests.

The answer (`store.holders`: two index probes per unit) is kept until this process writes a
reservation (the store counts its writes), the time passes a start or an end in it, or it is
one poll interval old: a booking made through another replica shows within one poll interval.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from ..model import Reservation, utcnow
from ..store import Store

HORIZON = timedelta(days=30)  # the next holder shown starts within this

Pair = tuple[Reservation | None, Reservation | None]


class HolderCache:
    """{GPU ref: (current, next)} of the units that have either, cached as said above."""

    def __init__(self, store: Store, run: Callable[..., Awaitable[Any]], ttl: float) -> None:
        self.store = store
        self._run = run
        self.ttl = ttl
        self._lock = asyncio.Lock()
        self._key: tuple[int, float, datetime] | None = None  # (version, expiry, boundary)
        self._value: dict[str, Pair] = {}
        self.generation = 0  # counts reads: an answer built from them is current while equal

    def _fresh(self, now: datetime) -> bool:
        if self._key is None:
            return False
        version, expiry, boundary = self._key
        return (
            version == self.store.reservations.version
            and time.monotonic() < expiry
            and now < boundary
        )

    async def get(self) -> dict[str, Pair]:
        """The holders now (one read shared by the requests that wait for it)."""
        if self._fresh(utcnow()):
            return self._value
        async with self._lock:
            now = utcnow()
            if self._fresh(now):
                return self._value
            version, expiry = self.store.reservations.version, time.monotonic() + self.ttl
            found = await self._run(self.store.holders.at, now, now + HORIZON)
            unit = self.store.inventory.gpu_by_id
            self._value = {unit(gpu_id).ref: pair for gpu_id, pair in found.items()}
            edges = [
                t for cur, nxt in found.values() for t in (cur and cur.end, nxt and nxt.start) if t
            ]
            self._key = (version, expiry, min(edges, default=now + HORIZON))
            self.generation += 1
            return self._value
