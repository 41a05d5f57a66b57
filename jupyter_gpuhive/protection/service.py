"""Protection: turns each sweep's violations into handler actions along an escalation ladder.

Per sweep: detect (pure, violations.py), open/refresh/close the violation records in one
write and fire every ladder step that is due (escalation.py). Each handler call is its own
task with a deadline (actions.py), so a slow or failing handler never delays detection or
the others; its outcome is logged and recorded in the history. Reservations whose GPUs sit
idle are reported to their holder and, when the policy says so, ended early (idle.py);
reservations never used are released (noshow.py). The read side is reports.py, the
settings and handler configuration config.py.

A new leader (another replica, or this server restarted) continues the violations and idle
notices left open: the same records, no second notice, the ladder from the steps already
recorded. Those not seen for RESUME_WITHIN (a long outage), and other notices, are closed
at the last time they were seen, as by a previous run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from importlib.metadata import EntryPoint
from typing import Any

from ..errors import NotFound
from ..hosts.pool import HostPool
from ..integrations.mail import MailSettings
from ..integrations.transport import Transports
from ..model import Identity, Reservation
from ..model.accounts import gpuhive_user, unix_account
from ..model.violations import IDLE, OFFENCES, ViolationRecord
from ..monitor.sampler import Sweep
from ..store import Store
from .actions import Actions, EndReservation, Run, cannot_end
from .config import ProtectionSettings, configure
from .escalation import Escalation
from .handlers import HandlerContext, Incident, ViolationHandler
from .idle import IdleWatch
from .noshow import NoShows
from .reports import Reports
from .violations import JobOwners, LentProcesses, detect, idle_reservations

__all__ = ["Protection", "ProtectionSettings"]

log = logging.getLogger(__name__)

# An open violation last seen longer ago than this is not continued by a new leader: it is
# closed at the last time it was seen, and the same process still running is a new one.
RESUME_WITHIN = timedelta(minutes=10)


class Protection:
    """Watches sweeps for violations and idle reservations and acts on them."""

    def __init__(
        self,
        settings: ProtectionSettings,
        store: Store,
        pool: HostPool | None,
        run: Run,
        *,
        publish: Callable[[dict[str, Any]], Any] | None = None,
        job_owners: Callable[[Sweep], Awaitable[JobOwners]] | None = None,
        lent: Callable[[Sweep], Awaitable[LentProcesses]] | None = None,
        end_reservation: EndReservation = cannot_end,
        handler_types: Mapping[str, type[ViolationHandler] | EntryPoint] | None = None,
        public: bool = False,
        mail: MailSettings | None = None,
        http: Transports | None = None,
        opened: Callable[[list[dict[str, Any]]], Any] = lambda _violations: None,
        zone: tzinfo = UTC,
    ) -> None:
        self.settings = settings
        self.public = public  # every violation listed to every user (details: involved only)
        self.store = store
        self._run = run
        self._job_owners = job_owners
        self._lent = lent  # processes of preemptible jobs on a reservation's lent GPUs
        self._opened = opened  # told the violations each sweep opened (integrations' events)
        built = configure(settings, HandlerContext(pool, publish, mail, http), handler_types)
        self.policy, self.ladder, self.handlers = built.policy, built.ladder, built.handlers
        self.actions = Actions(self.handlers, store, run)
        unix = self.unix_user
        self.escalation = Escalation(self.ladder, self.actions, store, run, unix, zone)
        self.idle = IdleWatch(settings, self.actions, store, run, unix, end_reservation, zone)
        self.reports = Reports(store, run, unix, self.escalation.cases, public)
        self._ready = False
        # no-shows: the site's times, or a host group's (settings.host_group: a host's group)
        self.noshows = NoShows(settings, self.actions, store, run, unix, end_reservation, zone)

    def unix_user(self, name: str) -> str:
        """The UNIX user of a gpuhive user (the identity unless configured)."""
        return unix_account(self.settings.user_map, name)

    def gpuhive_user(self, unix: str) -> str:
        """The gpuhive user of a UNIX user (the inverse of `unix_user`)."""
        return gpuhive_user(self.settings.user_map, unix)

    # --- the sweep listener ----------------------------------------------------------------

    async def on_sweep(self, sweep: Sweep) -> None:
        """Detect, record and escalate; register this as a Sampler listener."""
        noshows = await self.noshows.refresh()  # watched anywhere (site, host groups)
        if self.settings.level == 0 and not self.settings.idle_after and not noshows:
            return
        at = sweep.at
        if not self._ready:
            await self._resume(at)
            self._ready = True
        active = await self._run(self.store.reservations.window, at, at + timedelta(microseconds=1))
        owners = await self._job_owners(sweep) if self._job_owners else None
        lent = await self._lent(sweep) if self._lent else None
        samples = [s for s in sweep.samples.values() if not s.gpu_error]
        seen = {s.host for s in samples}
        findings = detect(samples, active, at, self.policy, job_owners=owners,
                          unix_user=self.unix_user, lent=lent)  # fmt: skip
        opened = set(await self.escalation.track(at, findings, seen, {r.id: r for r in active}))
        if opened:
            self._opened([v for v in self.ongoing() if v["violation"] in opened])
        if self.settings.idle_after:
            await self.idle.track(
                at, idle_reservations(samples, active, at, self.settings.idle_util)
            )
        if noshows:
            await self.noshows.track(at, samples, active, owners)
        self.escalation.escalate(at, seen)

    async def _resume(self, at: datetime) -> None:
        """Continue the violations and idle notices a previous leader left open; close the
        others (see RESUME_WITHIN)."""
        found: list[ViolationRecord] = await self._run(self.store.violations.still_open)
        recent = [r for r in found if r.last_seen_at >= at - RESUME_WITHIN]
        held: dict[int, Reservation] = {}
        for rid in {r.reservation_id for r in recent if r.reservation_id is not None}:
            with contextlib.suppress(NotFound):
                held[rid] = await self._run(self.store.reservations.get, rid)
        ladder = [r for r in recent if r.kind in OFFENCES]
        idle = {
            r.reservation_id: (r, held[r.reservation_id])
            for r in recent
            if r.kind == IDLE and r.reservation_id in held and self.settings.idle_after
        }
        self.escalation.resume(ladder, held)
        self.idle.resume(idle)
        kept = [r.id for r in ladder] + [r.id for r, _ in idle.values()]
        closed = await self._run(self.store.violations.close_stale, kept)
        if kept:
            log.info("gpuhive: continuing %d open violation(s) and notice(s)", len(kept))
        if closed:
            log.info("gpuhive: closed %d violation(s) left open by a previous run", closed)

    def pause(self) -> None:
        """Leadership lost: forget the open cases (the next leader continues them)."""
        self._ready = False
        self.escalation.forget()
        self.idle.forget()

    def notify(self, incident: Incident, names: Sequence[str], step: Mapping[str, Any]) -> None:
        """Tell the named handlers that act on it about an incident (once each, no ladder)."""
        self.actions.notify(incident, names, step)

    # --- queries (reports.py) ----------------------------------------------------------------

    async def history(
        self,
        start: datetime,
        end: datetime,
        *,
        user: str | None = None,
        host: str | None = None,
        reservation_id: int | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1000,
        viewer: Identity | None = None,
        public: bool = False,
    ) -> list[dict[str, Any]]:
        """Stored violations overlapping [start, end), newest first, as `viewer` may see them."""
        return await self.reports.history(
            start, end, user=user, host=host, reservation_id=reservation_id, kinds=kinds,
            limit=limit, viewer=viewer, public=public,
        )  # fmt: skip

    async def report(
        self,
        viewer: Identity,
        start: datetime,
        end: datetime,
        *,
        user: str | None = None,
        host: str | None = None,
        reservation_id: int | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1000,
    ) -> dict[str, Any]:
        """The violations of [start, end) and those open now, as `viewer` may see them."""
        return await self.reports.report(
            viewer, start, end, user=user, host=host, reservation_id=reservation_id,
            kinds=kinds, limit=limit,
        )  # fmt: skip

    async def of_reservation(self, reservation_id: int, viewer: Identity) -> list[dict[str, Any]]:
        """A reservation's violations and idle notices, as `viewer` may see them."""
        return await self.reports.for_reservation(reservation_id, viewer, self.public)

    async def for_reservation(
        self, reservation_id: int, viewer: Identity | None = None, public: bool = False
    ) -> list[dict[str, Any]]:
        """A reservation's violations and idle notices, oldest first, as `viewer` may see them."""
        return await self.reports.for_reservation(reservation_id, viewer, public)

    def ongoing(self, viewer: Identity | None = None, public: bool = False) -> list[dict[str, Any]]:
        """The violations open right now (live state, no database), as `viewer` may see them."""
        return self.reports.ongoing(viewer, public)

    async def open_now(
        self, viewer: Identity | None = None, public: bool = False
    ) -> list[dict[str, Any]]:
        """The violations open now, from the store: the same on every replica (the API's)."""
        return await self.reports.open_now(viewer, public)

    def involves(self, viewer: Identity, holder: str | None, offender: str | None) -> bool:
        """Whether `viewer` holds the reserved GPU or (as their UNIX user) is the offender."""
        return self.reports.involves(viewer, holder, offender)

    # --- lifecycle -------------------------------------------------------------------------

    async def stop(self) -> None:
        """Cancel handler calls still running."""
        await self.actions.stop()

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until the handler calls started so far are done (tests, benchmarks)."""
        await self.actions.drain(timeout)
