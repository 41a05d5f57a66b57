"""Handler calls: each one its own task with a deadline, its outcome logged and recorded.

A slow or failing handler (SMTP down, no tty, sudo refused) never delays detection or the
other handlers; what it did, or why it failed, goes into the violation's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..model import Reservation, utcnow
from ..store import Store
from .handlers import HandlerFailed, Incident, ViolationHandler

log = logging.getLogger(__name__)

Run = Callable[..., Awaitable[Any]]
# Ends a running reservation now, for a reason ('released: no-show'): the bookings service's
# `end`, which the Hive hands in (protection never writes reservations itself).
EndReservation = Callable[[Reservation, str], Awaitable[Any]]


async def cannot_end(res: Reservation, reason: str) -> None:
    """The stand-in when no bookings service was handed in: ending is refused (and recorded)."""
    raise RuntimeError(f"no bookings service to end reservation {res.id} ({reason})")


class Actions:
    """Runs handler calls (and other protection work) as tasks and records their outcome."""

    def __init__(self, handlers: Mapping[str, ViolationHandler], store: Store, run: Run) -> None:
        self.handlers = handlers
        self.store = store
        self._run = run
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run `work` as a task of its own, cancelled by stop()."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def fire(
        self,
        incident: Incident,
        handler: ViolationHandler,
        step: Mapping[str, Any],
        index: int | None,
    ) -> None:
        """Call `handler` about `incident` in a task; `index`: the ladder step, if any."""
        self.spawn(self._act(incident, handler, step, index), f"gpuhive-{handler.name}")

    def notify(self, incident: Incident, names: Sequence[str], step: Mapping[str, Any]) -> None:
        """Tell the named handlers that act on it about an incident (once each, no ladder)."""
        for name in names:
            handler = self.handlers[name]
            if handler.applies(incident):
                self.fire(incident, handler, step, None)

    async def _act(
        self,
        incident: Incident,
        handler: ViolationHandler,
        step: Mapping[str, Any],
        index: int | None,
    ) -> None:
        started = utcnow()
        deadline = handler.deadline(step)
        try:
            async with asyncio.timeout(deadline):
                detail = await handler.handle(incident, step)
            ok = True
        except HandlerFailed as error:
            ok, detail = False, str(error)
        except TimeoutError:
            ok, detail = False, f"no result within {deadline:g} s"
        except Exception as error:
            log.exception("gpuhive: violation handler %s crashed", handler.name)
            ok, detail = False, f"{type(error).__name__}: {error}"
        if ok:
            log.info("gpuhive: violation %d: %s: %s", incident.violation_id, handler.name, detail)
        else:
            log.warning("gpuhive: violation %d: %s failed: %s", incident.violation_id,
                        handler.name, detail)  # fmt: skip
        await self.record(incident.violation_id, started, index, handler.name, ok, detail)

    async def record(
        self, vid: int, at: datetime, step: int | None, handler: str, ok: bool, detail: str
    ) -> None:
        """Add an action to a violation's history; a failure to do so is only logged."""
        try:
            await self._run(self.store.violations.add_action, vid, at, step, handler, ok, detail)
        except Exception:
            log.exception("gpuhive: could not record the action of %s on violation %d", handler,
                          vid)  # fmt: skip

    async def stop(self) -> None:
        """Cancel the tasks still running."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until the tasks started so far are done (tests, benchmarks)."""
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
