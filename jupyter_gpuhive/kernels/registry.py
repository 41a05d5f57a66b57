"""The live kernels on reservations: who owns them, where they run, what may be done to them.

Interface (for the lifecycle, the UI and team mode; see also docs/how-to/kernels.md):

    hive.kernels: KernelRegistry
      get(kernel_id) -> KernelRecord | None      live, or ended within the last hour
      live() -> list[KernelRecord]               starting, running or restarting
      of_reservation(rid) / of_owner(name)       the live ones
      subscribe(fn) -> unsubscribe               fn(KernelEvent) on "started", "restarted",
                                                 "ended" (sync or async; errors are logged)
      check(kernel_id, who, action)              Forbidden unless `who` owns it or is admin
      await interrupt(kernel_id)                 SIGINT to the kernel's remote process group
      await shutdown(kernel_id, reason=None)     through the server's kernel manager (its maps
                                                 stay right), else the provisioner itself
      await signal(kernel_id, signum)            any signal to the process group

    KernelRecord: kernel_id, owner (gpuhive user, fixed at the first launch), unix_user,
      reservation_id, host, gpus (refs), gpu_uuids, pid, pgid (on the host), started_at (first
      launch), launched_at (latest), restarts, state ("starting" | "running" | "restarting" |
      "dead" | "ended"), reason (why it died or ended), ended_at, live.

The server wires two things (server/kernel_guard.py): `requester`, who is asking in the current
request (None outside one: auto-restart, culling, the lifecycle), and `manager`, the server's
kernel manager. Actions the registry starts itself (`interrupt`, `shutdown`) are marked
`internal()` so the server's guard lets them through whoever's request they run in.

Kernels live in this process only (no table): a kernel is its SSH connection and forwards,
which end with the server; its remote process exits when that connection drops.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import signal as signals
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from ..errors import Conflict, Forbidden, Invalid, NotFound, Unavailable
from ..hosts.pool import HostPool
from ..model import Gpu, HostDecl, Identity, Reservation, describe_instant, utcnow
from ..model.approvals import tentative_refusal
from ..model.kernel import KernelState
from ..store import Store

log = logging.getLogger(__name__)

LIVE = (KernelState.STARTING, KernelState.RUNNING, KernelState.RESTARTING)
KEEP_ENDED = timedelta(hours=1)  # how long an ended kernel's record (and reason) stays readable
_INTERNAL: contextvars.ContextVar[bool] = contextvars.ContextVar("gpuhive_kernel_internal",
                                                                 default=False)  # fmt: skip


class Control(Protocol):
    """What the provisioner lets the registry do to its kernel."""

    async def signal(self, signum: int) -> None: ...
    async def stop(self) -> None: ...


@dataclass
class KernelRecord:
    """One kernel on a reservation, as the registry knows it."""

    kernel_id: str
    owner: str
    unix_user: str
    reservation_id: int
    host: str
    gpus: tuple[str, ...]
    gpu_uuids: tuple[str, ...]
    started_at: datetime
    launched_at: datetime
    pid: int | None = None
    pgid: int | None = None
    restarts: int = 0
    state: KernelState = KernelState.STARTING
    reason: str | None = None
    ended_at: datetime | None = None
    control: Control | None = field(default=None, repr=False, compare=False)

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id, "owner": self.owner, "unix_user": self.unix_user,
            "reservation_id": self.reservation_id, "host": self.host, "gpus": list(self.gpus),
            "gpu_uuids": list(self.gpu_uuids), "pid": self.pid, "pgid": self.pgid,
            "started_at": self.started_at.isoformat(), "launched_at": self.launched_at.isoformat(),
            "restarts": self.restarts, "state": str(self.state), "reason": self.reason,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
        }  # fmt: skip


@dataclass(frozen=True)
class KernelEvent:
    """Something that happened to a kernel: 'started', 'restarted' or 'ended'."""

    kind: str
    record: KernelRecord


@dataclass(frozen=True)
class Placement:
    """Where and as whom a reservation's kernel runs."""

    reservation: Reservation
    host: HostDecl
    unix_user: str
    gpus: tuple[Gpu, ...]


Listener = Callable[[KernelEvent], Any]


@contextlib.contextmanager
def internal() -> Iterator[None]:
    """Mark what runs inside as gpuhive's own action (not the current request's user's)."""
    token = _INTERNAL.set(True)
    try:
        yield
    finally:
        _INTERNAL.reset(token)


def is_internal() -> bool:
    """Whether the caller runs inside `internal()`."""
    return _INTERNAL.get()


class KernelRegistry:
    """The live kernels of this server, the checks on them, and the actions on them."""

    def __init__(
        self,
        store: Store,
        pool: HostPool,
        run: Callable[..., Awaitable[Any]],
        *,
        identity_of: Callable[[str], Identity],
        unix_user: Callable[[str], str] = lambda name: name,
        zone: tzinfo | None = None,
        now: Callable[[], datetime] = utcnow,
        reclaim: Callable[[str, tuple[str, ...], str], Awaitable[Any]] | None = None,
    ) -> None:
        self.store, self.pool, self.run = store, pool, run
        # Takes GPUs a reservation lent to preemptible jobs back before its holder's kernel
        # starts on them (owner, GPU UUIDs, why); waits at most the jobs' grace.
        self.reclaim = reclaim
        self.identity_of = identity_of
        self.unix_user = unix_user
        self.zone: tzinfo = zone or ZoneInfo("UTC")
        self.now = now
        self.requester: Callable[[], Identity | None] = lambda: None
        self.manager: Any = None  # the server's kernel manager, once wired
        self._records: dict[str, KernelRecord] = {}
        self._listeners: list[Listener] = []
        self._why: dict[str, str] = {}  # why shutdown() is ending a kernel

    # --- reading ------------------------------------------------------------------------

    def get(self, kernel_id: str) -> KernelRecord | None:
        return self._records.get(kernel_id)

    def live(self) -> list[KernelRecord]:
        return [r for r in self._records.values() if r.live]

    def of_reservation(self, reservation_id: int) -> list[KernelRecord]:
        return [r for r in self.live() if r.reservation_id == reservation_id]

    def of_owner(self, name: str) -> list[KernelRecord]:
        return [r for r in self.live() if r.owner == name]

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(event)` on each start, restart and end; returns the unsubscriber."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # --- checks -------------------------------------------------------------------------

    def check(self, kernel_id: str, who: Identity, action: str) -> KernelRecord | None:
        """Forbidden unless `who` owns the kernel or is an admin; None: not one of ours."""
        record = self._records.get(kernel_id)
        if record is None or who.is_admin or who.name == record.owner:
            return record
        raise Forbidden(
            f"Kernel {kernel_id} belongs to {record.owner} (reservation "
            f"{record.reservation_id} on {record.host}): only {record.owner} or an admin "
            f"may {action} it."
        )

    async def place(self, reservation_id: int, who: Identity | None, host: str | None
                    ) -> Placement:  # fmt: skip
        """Where a new kernel of reservation `reservation_id` runs; refusals say why."""
        res = await self.run(self.store.reservations.get, reservation_id)
        if res.cancelled:
            raise Conflict(f"Reservation {res.id} was cancelled: no kernel can start on it.")
        if res.tentative:
            raise Conflict(tentative_refusal(res, "start"))
        if who is not None and who.name != res.owner:
            raise Forbidden(
                f"Reservation {res.id} is {res.owner}'s: only {res.owner} can start a kernel "
                "on it (it runs as their account)."
            )
        self.check_time(res)
        hosts = list(dict.fromkeys(g.host for g in res.gpus))
        most = max(hosts, key=lambda h: sum(g.host == h for g in res.gpus))
        chosen = host or most
        if chosen not in hosts:
            raise Invalid(
                f"The kernelspec asks for host {chosen!r}, but reservation {res.id} has no GPU "
                f"there: name one of {', '.join(hosts)} (or leave 'host' out for {most})."
            )
        decl = self.pool.hosts.get(chosen)
        if decl is None:
            raise Unavailable(
                f"Host {chosen} of reservation {res.id} is gone: it is no longer in the hosts "
                f"file or the configuration. Add it back (jupyter gpuhive hosts add {chosen} …) "
                "or book GPUs on a host gpuhive still has."
            )
        gpus = tuple(g for g in res.gpus if g.host == chosen)
        return Placement(res, decl, self.unix_user(res.owner), gpus)

    def check_time(self, res: Reservation) -> None:
        """Conflict when now is outside [start, end) of `res`, with its times."""
        now = self.now()
        if res.start <= now < res.end:
            return
        if now >= res.end:  # one short sentence: JupyterLab shows it in a small dialog (no '%':
            # jupyter_server's kernels API shows tornado's log_message, which doubles it)
            raise Conflict(
                f"Reservation {res.id} ended at {describe_instant(res.end, self.zone)}: book GPUs "
                "again in the GPU sidebar to start a kernel on them."
            )
        fmt = "%Y-%m-%d %H:%M %Z"
        span = f"{res.start.astimezone(self.zone):{fmt}} to {res.end.astimezone(self.zone):{fmt}}"
        raise Conflict(
            f"Reservation {res.id} runs from {span}; it has not started yet (now "
            f"{now.astimezone(self.zone):{fmt}}), so no kernel can start on it now."
        )

    async def reservation(self, reservation_id: int) -> Reservation:
        """A reservation by id (NotFound when there is none)."""
        return await self.run(self.store.reservations.get, reservation_id)

    # --- what provisioners report -----------------------------------------------------------

    def launched(self, record: KernelRecord) -> None:
        """A kernel (re)started: record it, tell the listeners."""
        first = record.kernel_id not in self._records or not self._records[record.kernel_id].live
        record.state = KernelState.RUNNING
        self._records[record.kernel_id] = record
        self._forget_old()
        self._emit(KernelEvent("started" if first else "restarted", record))

    def restarting(self, kernel_id: str) -> None:
        record = self._records.get(kernel_id)
        if record is not None and record.live:
            record.state = KernelState.RESTARTING

    def ended(self, kernel_id: str, state: KernelState, reason: str | None) -> None:
        """A kernel ended (`state` ENDED or DEAD) for `reason`."""
        record = self._records.get(kernel_id)
        if record is None or not record.live:
            return
        reason = self._why.pop(kernel_id, None) or reason  # shutdown()'s reason comes first
        record.state, record.reason, record.ended_at = state, reason, self.now()
        record.control = None
        self._emit(KernelEvent("ended", record))

    # --- actions ------------------------------------------------------------------------

    async def interrupt(self, kernel_id: str) -> None:
        """SIGINT to the kernel's process group (the running cell gets KeyboardInterrupt)."""
        await self.signal(kernel_id, signals.SIGINT)

    async def signal(self, kernel_id: str, signum: int) -> None:
        control = self._live(kernel_id).control
        if control is not None:
            with internal():
                await control.signal(signum)

    async def shutdown(self, kernel_id: str, reason: str | None = None) -> None:
        """Shut the kernel down (through the server's kernel manager when there is one).

        Without a `reason`, one past its reservation's end says that it ended (the end policy).
        """
        record = self._live(kernel_id)
        if not reason:
            try:
                res = await self.reservation(record.reservation_id)
            except NotFound:
                res = None
            if res is not None and self.now() >= res.end:
                at = res.end.astimezone(self.zone).strftime("%Y-%m-%d %H:%M %Z")
                reason = f"shut down: its reservation {res.id} ended at {at}"
        if reason:
            self._why[kernel_id] = reason
        try:
            with internal():
                if self.manager is not None and kernel_id in self.manager:
                    done = self.manager.shutdown_kernel(kernel_id)
                    if inspect.isawaitable(done):
                        await done
                elif record.control is not None:
                    await record.control.stop()
            self.ended(kernel_id, KernelState.ENDED, reason or "shut down")
        finally:
            self._why.pop(kernel_id, None)

    def _live(self, kernel_id: str) -> KernelRecord:
        record = self._records.get(kernel_id)
        if record is None or not record.live:
            raise NotFound(f"There is no live reservation kernel {kernel_id}.")
        return record

    def _emit(self, event: KernelEvent) -> None:
        for listener in list(self._listeners):
            try:
                result = listener(event)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    task.add_done_callback(_log_failure)
            except Exception:
                log.exception("gpuhive: a kernel listener failed on %s", event.kind)

    def _forget_old(self) -> None:
        cutoff = self.now() - KEEP_ENDED
        for kid, rec in list(self._records.items()):
            if rec.ended_at is not None and rec.ended_at < cutoff:
                del self._records[kid]


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("gpuhive: a kernel listener failed", exc_info=task.exception())
