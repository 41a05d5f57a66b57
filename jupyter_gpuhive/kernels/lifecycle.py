"""A kernel's life bounded by its reservation: the warning before the end, the end policy.

One supervised loop checks the live reservation kernels at most every `tick` seconds (sooner
when a warning or an end is due). N minutes before the end the notebook is warned (an event
the labextension shows, and writes into the running cell when the kernel is busy); at the
end the kernel's policy runs: warn, interrupt, shutdown, or extend (tried just before the
end; when the slot is taken, the fallback runs at the end). Each warning and action is
recorded like a violation action: a 'kernel-end' notice of the reservation, with one action
row per step, shown in the reservation's history and in GET violations.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..bookings.service import Bookings
from ..errors import Forbidden, HiveError, NotFound
from ..model import Identity, Reservation, utcnow
from ..model.requests import BookingChange
from ..model.violations import KERNEL_END, Violation
from ..store import Store
from . import views
from .endpolicy import EXTEND, INTERRUPT, SHUTDOWN, WARN, Choice, EndSettings, clock, warning_text
from .live import KernelControl, LiveKernel
from .registry import KernelRegistry

log = logging.getLogger(__name__)

Run = Callable[..., Awaitable[Any]]
EXTENDED = "extended: kernel end policy"  # the reason the reservation's change event gives


Extend = Callable[[str, int, datetime], Awaitable[Reservation]]  # owner, reservation, new end


def extender(bookings: Bookings, identity_of: Callable[[str], Identity], run: Run) -> Extend:
    """Extend a reservation as its owner would (access rules, limits and clashes apply)."""

    async def extend(owner: str, reservation_id: int, end: datetime) -> Reservation:
        who = await run(identity_of, owner)
        return await bookings.update(who, reservation_id, BookingChange(end=end), EXTENDED)

    return extend


Publish = Callable[[dict[str, Any]], Any]


@dataclass
class _Watch:
    """What was done so far about one kernel's reservation end."""

    choice: Choice
    warned: datetime | None = None  # the end the last warning was about
    acted: datetime | None = None  # the end the policy ran for
    extend_tried: datetime | None = None  # the end an extension was tried for
    notice: int | None = None  # the open 'kernel-end' notice
    end: datetime | None = None  # the reservation's end as last seen
    events: list[dict[str, Any]] = field(default_factory=list)


class Lifecycle:
    """Warns kernels before their reservation ends and runs the end policy at the end."""

    def __init__(
        self,
        settings: EndSettings,
        control: KernelControl,
        store: Store,
        run: Run,
        *,
        extend: Extend,
        publish: Publish | None = None,
        level: int = 0,
    ) -> None:
        self.settings = settings
        self.control = control
        self.store = store
        self._run = run
        self._extend = extend
        self.publish = publish
        self._level = level
        self._watch: dict[str, _Watch] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # --- choices ---------------------------------------------------------------------------

    def kernel(self, who: Identity, kernel_id: str) -> LiveKernel:
        """A live reservation kernel `who` may see: its owner or an admin (404 / 403)."""
        found = next((k for k in self.control.live() if k.kernel_id == kernel_id), None)
        if found is None:
            raise NotFound(f"There is no kernel {kernel_id!r} on a reservation.")
        if found.owner != who.name and not who.is_admin:
            raise Forbidden(
                f"Kernel {kernel_id} belongs to {found.owner}; only they can change it."
            )
        return found

    def choice_of(self, kernel_id: str) -> Choice:
        """The end policy a kernel has now (the admin's default until its owner picks one)."""
        watch = self._watch.get(kernel_id)
        return watch.choice if watch else self.settings.choice()

    def choose(
        self, who: Identity, kernel_id: str, policy: str, fallback: str | None = None
    ) -> Choice:
        """Set a kernel's end policy (owner or admin, within the admin's bounds)."""
        self.kernel(who, kernel_id)
        choice = self.settings.choice(policy, fallback)
        self._watch_of(kernel_id).choice = choice
        self._wake.set()
        return choice

    async def view(self, who: Identity) -> dict[str, Any]:
        """`who`'s live reservation kernels (admins: all) and the site's end policies."""
        return await views.listing(self, who)

    async def one(self, who: Identity, kernel_id: str) -> dict[str, Any]:
        """One live reservation kernel as its owner (or an admin) sees it."""
        return await views.shown(self, self.kernel(who, kernel_id))

    async def reservation(self, reservation_id: int) -> Reservation:
        """A reservation as stored now (404 when there is none)."""
        found: Reservation = await self._run(self.store.reservations.get, reservation_id)
        return found

    def _watch_of(self, kernel_id: str) -> _Watch:
        if kernel_id not in self._watch:
            self._watch[kernel_id] = _Watch(self.settings.choice())
        return self._watch[kernel_id]

    # --- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the checking loop (once)."""
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._loop(), name="gpuhive-kernels")

    def kick(self) -> None:
        """Check now (a kernel started or ended, a reservation changed)."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop the loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            wait = self.settings.tick
            try:
                wait = await self.check(utcnow())
            except Exception:
                log.exception("gpuhive: the kernel lifecycle check failed; trying again")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.05, wait))

    async def check(self, now: datetime) -> float:
        """One pass over the live kernels; returns the seconds until the next thing is due."""
        live = self.control.live()
        for gone in set(self._watch) - {k.kernel_id for k in live}:
            watch = self._watch.pop(gone)
            if watch.notice is not None:
                await self._close(watch.notice, now)
        due = self.settings.tick
        for kernel in live:
            try:
                res = await self.reservation(kernel.reservation_id)
            except NotFound:
                continue
            watch = self._watch_of(kernel.kernel_id)
            end = res.cancelled_at if res.cancelled_at and res.cancelled_at < res.end else res.end
            if end is None:  # pragma: no cover - a cancelled reservation has its instant
                continue
            if watch.end is not None and end != watch.end and watch.notice is not None:
                await self._note(watch, now, "reservation", True,
                                 f"the reservation's end moved to {clock(end)}")  # fmt: skip
                await self._close(watch.notice, now)
                watch.notice = None
            watch.end = end
            due = min(due, await self._step(kernel, res, end, watch, now))
        return max(0.05, due)

    async def _step(
        self, kernel: LiveKernel, res: Reservation, end: datetime, watch: _Watch, now: datetime
    ) -> float:
        """Do what is due for one kernel; the seconds until its next step."""
        s = self.settings
        if watch.acted == end:
            return s.tick
        warn_at = end - s.warn_before
        if now >= warn_at and watch.warned != end and now < end:
            watch.warned = end
            await self._warn(kernel, res, end, watch, now)
        extending = watch.choice.policy == EXTEND and watch.extend_tried != end
        if extending and now >= end - s.extend_lead:
            watch.extend_tried = end
            if await self._try_extend(kernel, res, end, watch, now):
                return 0.05  # the next pass sees the new end
        if now >= end:
            watch.acted = end
            policy = watch.choice.policy
            await self._act(kernel, res, end, watch, now,
                            watch.choice.fallback if policy == EXTEND else policy)  # fmt: skip
            return s.tick
        pending = [end]
        if watch.warned != end:
            pending.append(warn_at)
        if watch.choice.policy == EXTEND and watch.extend_tried != end:
            pending.append(end - s.extend_lead)
        return (min(pending) - now).total_seconds()

    # --- steps -----------------------------------------------------------------------------

    async def _warn(
        self, kernel: LiveKernel, res: Reservation, end: datetime, watch: _Watch, now: datetime
    ) -> None:
        text = warning_text(res.id, _gpus(res), end, watch.choice)
        await self._note(watch, now, "kernel-warning", True, text, kernel=kernel, res=res)
        self._emit(kernel, res, "warning", text, end, watch.choice)

    async def _try_extend(
        self, kernel: LiveKernel, res: Reservation, end: datetime, watch: _Watch, now: datetime
    ) -> bool:
        new_end = end + self.settings.extend_by
        try:
            done = await self._extend(kernel.owner, res.id, new_end)
        except HiveError as error:
            text = (
                f"Reservation {res.id} could not be extended to {clock(new_end)}: "
                f"{error.message} At {clock(end)} the fallback runs: {watch.choice.fallback}."
            )
            await self._note(watch, now, "kernel-extend", False, text, kernel=kernel, res=res)
            self._emit(kernel, res, "extend-failed", text, end, watch.choice)
            return False
        text = (
            f"Reservation {res.id} was extended to {clock(done.end)} for kernel {kernel.kernel_id}."
        )
        await self._note(watch, now, "kernel-extend", True, text, kernel=kernel, res=res)
        if watch.notice is not None:
            await self._close(watch.notice, now)
            watch.notice = None
        watch.end = done.end
        self._emit(kernel, res, "extended", text, done.end, watch.choice)
        return True

    async def _act(
        self,
        kernel: LiveKernel,
        res: Reservation,
        end: datetime,
        watch: _Watch,
        now: datetime,
        policy: str,
    ) -> None:
        kid = kernel.kernel_id
        ok = True
        try:
            if policy == INTERRUPT:
                await self.control.interrupt(kid)
                text = f"Reservation {res.id} ended at {clock(end)}: kernel {kid} was interrupted."
            elif policy == SHUTDOWN:
                await self.control.shutdown(kid)
                text = f"Reservation {res.id} ended at {clock(end)}: kernel {kid} was shut down."
            else:
                text = (
                    f"Reservation {res.id} ended at {clock(end)}: kernel {kid} keeps running "
                    "on GPUs no longer reserved for it."
                )
        except Exception as error:
            ok = False
            text = (
                f"Reservation {res.id} ended at {clock(end)}: could not {policy} "
                f"kernel {kid}: {error}"
            )
            log.warning("gpuhive: %s", text)
        await self._note(watch, now, f"kernel-{policy}", ok, text, kernel=kernel, res=res)
        if watch.notice is not None:
            await self._close(watch.notice, now)
            watch.notice = None
        self._emit(kernel, res, "ended", text, end, watch.choice, action=policy, ok=ok)

    # --- records and events ----------------------------------------------------------------

    async def _note(
        self,
        watch: _Watch,
        at: datetime,
        handler: str,
        ok: bool,
        detail: str,
        *,
        kernel: LiveKernel | None = None,
        res: Reservation | None = None,
    ) -> None:
        """Add an action to the kernel's open notice (opened first when there is none)."""
        try:
            if watch.notice is None:
                if kernel is None or res is None:
                    return
                ids = await self._run(
                    self.store.violations.sync, at, [self._record(kernel, res, at)], None, ()
                )
                watch.notice = ids[0]
            await self._run(
                self.store.violations.add_action, watch.notice, at, None, handler, ok, detail
            )
        except Exception:
            log.exception("gpuhive: could not record the kernel action %s", handler)

    async def _close(self, notice: int, at: datetime) -> None:
        try:
            await self._run(self.store.violations.sync, at, (), None, [notice])
        except Exception:
            log.exception("gpuhive: could not close the kernel notice %d", notice)

    def _record(self, kernel: LiveKernel, res: Reservation, at: datetime) -> Violation:
        gpu = res.gpus[0]
        return Violation(
            KERNEL_END, gpu.host, ",".join(g.ref for g in res.gpus), gpu.uuid, None, res.owner,
            res.id, self._level, (), (f"kernel {kernel.kernel_id}",),
            f"kernel {kernel.kernel_id} at the end of reservation {res.id}", at,
        )  # fmt: skip

    def _emit(
        self,
        kernel: LiveKernel,
        res: Reservation,
        kind: str,
        message: str,
        end: datetime,
        choice: Choice,
        **extra: Any,
    ) -> None:
        event = {
            "kind": kind,
            "kernel_id": kernel.kernel_id,
            "reservation_id": res.id,
            "owner": kernel.owner,
            "message": message,
            "end": end.isoformat(),
            "policy": choice.policy,
            **extra,
        }
        self._watch_of(kernel.kernel_id).events.append(event)
        del self._watch_of(kernel.kernel_id).events[:-20]
        if self.publish is not None:
            try:
                self.publish(event)
            except Exception:
                log.exception("gpuhive: could not publish the kernel event %s", kind)

    def events(self, kernel_id: str) -> list[dict[str, Any]]:
        """The latest warnings and actions of a live kernel, oldest first."""
        watch = self._watch.get(kernel_id)
        return list(watch.events) if watch else []

    def warned(self, kernel_id: str) -> bool:
        """Whether the kernel was warned about its reservation's current end."""
        watch = self._watch.get(kernel_id)
        return bool(watch and watch.warned is not None and watch.warned == watch.end)


def _gpus(res: Reservation) -> str:
    return ", ".join(g.ref for g in res.gpus)


__all__ = ["EXTEND", "INTERRUPT", "KERNEL_END", "SHUTDOWN", "WARN", "Lifecycle"]


def end_policy(
    settings: EndSettings, kernels: KernelRegistry, store: Store, run: Run, bookings: Bookings,
    identity_of: Callable[[str], Identity], level: int = 0,
) -> Lifecycle:  # fmt: skip
    """The end policy over `kernels`, woken by each of their events, extending through
    `bookings` as the owner would."""
    life = Lifecycle(settings, kernels, store, run, level=level,
                     extend=extender(bookings, identity_of, run))  # fmt: skip
    kernels.subscribe(lambda event: life.kick())
    return life
