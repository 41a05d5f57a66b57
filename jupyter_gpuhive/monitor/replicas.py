"""Live state for every replica: the leader publishes each sweep, the others take it.

The leader's sampler process encodes each sweep (`published.encode`); the leader writes it to
the store (`store.live_sweeps`, the newest `keep` kept). Every other replica checks the newest
id every half poll interval (one index lookup) and takes the sweeps it has not seen, in order,
exactly as the leader took them from its sampler: the same live hosts, host states and metric
series on every replica, and a replica that becomes leader already has the series. A replica
that starts (or a personal server that restarts) takes the kept sweeps first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from ..hosts.status import HostStatus
from ..store import Store
from .published import decode
from .sampler import Sweep

log = logging.getLogger(__name__)

Take = Callable[[Sweep, dict[str, HostStatus]], None]


class Publication:
    """Publishes this replica's sweeps while it leads; takes the leader's while it follows."""

    def __init__(
        self,
        store: Store,
        run: Callable[..., Awaitable[Any]],
        take: Take,
        keep: int,
        interval: float,
    ) -> None:
        self.store = store
        self._run = run
        self._take = take
        self.keep = max(1, keep)
        self.interval = max(0.2, interval / 2)
        self.seen = 0  # id of the newest published sweep this replica holds
        self._task: asyncio.Task[None] | None = None
        self._outbox: list[tuple[datetime, bytes]] = []

    @property
    def following(self) -> bool:
        return self._task is not None

    # --- leading -------------------------------------------------------------------

    def queue(self, at: datetime, body: bytes) -> None:
        """A sweep this replica took from its sampler, to publish (in order) next."""
        self._outbox.append((at, body))

    def replace(self, at: datetime, body: bytes) -> None:
        """Publish `body` instead of what was queued for the sweep at `at` (attributed since)."""
        self._outbox = [(when, body if when == at else old) for when, old in self._outbox]

    async def publish(self) -> None:
        """Write the queued sweeps; a failure is logged and those sweeps stay unpublished."""
        sent, self._outbox = self._outbox, []
        for at, body in sent:
            try:
                self.seen = await self._run(self.store.live_sweeps.publish, at, body, self.keep)
            except Exception:
                log.exception("gpuhive: could not publish a sweep for the other replicas")

    # --- following -----------------------------------------------------------------

    def follow(self) -> None:
        """Take the leader's sweeps from now on (idempotent)."""
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._follow(), name="gpuhive-follow")

    async def unfollow(self) -> None:
        """Stop taking the leader's sweeps."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def catch_up(self) -> int:
        """Take every published sweep not taken yet (up to `keep`); how many."""
        newest = await self._run(self.store.live_sweeps.newest)
        if newest < self.seen:
            self.seen = 0  # the table was emptied (a restored database): start over
        if newest == self.seen:
            return 0
        rows = await self._run(self.store.live_sweeps.after, self.seen, self.keep)
        decoded = await self._run(lambda: [(i, decode(body)) for i, body in rows])
        for i, (sweep, statuses) in decoded:
            self._take(sweep, statuses)
            self.seen = i
        if decoded:
            await self._recorded(decoded[-1][1][0])
        return len(decoded)

    async def _recorded(self, sweep: Sweep) -> None:
        """What the leader records after a sweep shows here with the next one: re-read the
        topology, and the inventory when `sweep` names GPUs or MIG slices it lacks."""
        self.store.topology.forget()
        known = {unit.uuid for unit in self.store.inventory.units()}
        for sample in sweep.samples.values():
            if sample.gpu_error:
                continue
            for gpu in sample.gpus:
                parts = [m.uuid for m in sample.slices.get(gpu.uuid, ()) if m.uuid]
                if gpu.uuid not in known or any(p not in known for p in parts):
                    await self._run(self.store.inventory.reload)
                    return

    async def _follow(self) -> None:
        while True:
            try:
                await self.catch_up()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("gpuhive: reading the leader's sweeps failed; trying again")
            await asyncio.sleep(self.interval)
