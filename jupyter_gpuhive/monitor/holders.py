"""Each GPU's current and next holder for `GET hosts`, read once and shared by all requests.

The answer (`store.holders`: two index probes per unit) is kept until this process writes a
reservation that changes it, the time passes a start or an end in it, or it is one poll
interval old: a booking made through another replica shows within one poll interval.

Which writes change it: the store records the span and units each of this process's writes
touched (`Reservations.touched`). A booking that starts after the next one of each of its
units, or past the horizon, changes no pair, and most bookings are such (they are made days
ahead); re-reading after each of them made nearly every poll wait for a read under load.
A write the store could not describe (a failed one, flags) is taken to change it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from ..model import Reservation, utcnow
from ..store import Store
from ..store.reservations import Touch

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
        self.shares: dict[str, list[Reservation]] = {}  # GPU ref -> the shares held of it now
        self.generation = 0  # counts reads: an answer built from them is current while equal

    def _fresh(self, now: datetime) -> bool:
        if self._key is None:
            return False
        version, expiry, boundary = self._key
        if time.monotonic() >= expiry or now >= boundary:
            return False
        current = self.store.reservations.version
        if current == version:
            return True
        if not self._untouched(version, current, now):
            return False
        self._key = (current, expiry, boundary)  # those writes changed no pair
        return True

    def _untouched(self, since: int, until: int, now: datetime) -> bool:
        """Whether this process's writes after version `since` up to `until` (each recorded)
        leave every cached pair as it is."""
        seen = set()
        for version, touch in list(self.store.reservations.touched):
            if since < version <= until:
                seen.add(version)
                if self._changes(touch, now):
                    return False
        return len(seen) == until - since

    def _changes(self, touch: Touch, now: datetime) -> bool:
        """Whether a write's span may change a unit's current or next holder."""
        unit = self.store.inventory.gpu_by_id
        for gpu_id in touch.gpu_ids:
            current, following = self._value.get(unit(gpu_id).ref, (None, None))
            if touch.reservation_id in (r.id for r in (current, following) if r is not None):
                return True  # the holder or the next one itself was edited or cancelled
            if touch.start <= now < touch.end:
                return True  # it holds the unit now
            if now < touch.start < now + HORIZON and (
                following is None or touch.start < following.start
            ):
                return True  # it comes before the next one
        return False

    async def get(self) -> dict[str, Pair]:
        """The holders now (one read shared by the requests that wait for it)."""
        if self._fresh(utcnow()):
            return self._value
        async with self._lock:
            now = utcnow()
            if self._fresh(now):
                return self._value
            version, expiry = self.store.reservations.version, time.monotonic() + self.ttl
            found, shares = await self._run(self.store.holders.at_with_shares, now, now + HORIZON)
            unit = self.store.inventory.gpu_by_id
            self._value = {unit(gpu_id).ref: pair for gpu_id, pair in found.items()}
            self.shares = {unit(gpu_id).ref: held for gpu_id, held in shares.items()}
            edges = [
                t for cur, nxt in found.values() for t in (cur and cur.end, nxt and nxt.start) if t
            ] + [part.end for held in shares.values() for part in held]
            self._key = (version, expiry, min(edges, default=now + HORIZON))
            self.generation += 1
            return self._value
