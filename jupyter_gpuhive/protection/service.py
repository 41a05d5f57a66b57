"""Protection: turns each sweep's violations into handler actions along an escalation ladder.

Per sweep: detect (pure), open/refresh/close the violation records in one write, then fire
every ladder step that is due. Each handler call is its own task with a deadline, so a slow
or failing handler (SMTP down, no tty, sudo refused) never delays detection or the others;
its outcome is logged and recorded in the history. Reservations whose GPUs sit idle are
reported to their holder and, when the policy says so, ended early after a further grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib.metadata import EntryPoint
from typing import Any

from ..errors import Invalid
from ..hosts.pool import HostPool
from ..model import Identity, Reservation, utcnow
from ..model.violations import Violation
from ..monitor.sampler import Sweep
from ..store import Changes, Store
from .handlers import (
    HandlerConfigError,
    HandlerContext,
    HandlerFailed,
    Incident,
    ViolationHandler,
    build_handlers,
)
from .noshow import NoShows
from .violations import IDLE, KINDS, DetectionPolicy, JobOwners, detect, idle_reservations

log = logging.getLogger(__name__)

DEFAULT_LADDER: tuple[Mapping[str, Any], ...] = ({"after": 0, "handler": "terminal"},)
IDLE_ENDED = (
    "Your reservation {reservation} ('{title}') was ended early because its GPUs {gpu} were "
    "idle since {since}; they are free for others now."
)
MAX_QUERY = 10_000

Run = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Step:
    """One rung of the escalation ladder: after `after` seconds, call `handler`."""

    index: int
    after: float
    handler: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class ProtectionSettings:
    """Everything protection needs from configuration."""

    level: int = 1
    ladder: Sequence[Mapping[str, Any]] = DEFAULT_LADDER
    handlers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    allow_users: Collection[str] = ()
    allow_commands: Sequence[str] = ()
    ghost_mem_mib: int = 1024
    ghost_util: int = 10
    idle_after: float = 0.0  # seconds; 0: idle reservations are not watched
    idle_util: float = 5.0
    idle_end: bool = False
    idle_end_after: float = 1800.0
    idle_handlers: Sequence[str] = ("event",)
    noshow_after: float = 0.0  # seconds; 0: no-shows are not watched (protection.noshow)
    noshow_release_after: float = 1800.0
    noshow_handlers: Sequence[str] = ("event",)
    user_map: Mapping[str, str] = field(default_factory=dict)  # gpuhive user -> UNIX user


def parse_ladder(raw: Any) -> list[Step]:
    """Ladder steps from config, ordered by delay; bad entries raise HandlerConfigError."""
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise HandlerConfigError(f"the violation ladder must be a list of steps, not {raw!r}.")
    steps = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise HandlerConfigError(f"violation ladder step {i} must be a mapping: {entry!r}.")
        options = dict(entry)
        after, handler = options.pop("after", 0), options.pop("handler", None)
        if isinstance(after, bool) or not isinstance(after, int | float) or after < 0:
            raise HandlerConfigError(
                f"violation ladder step {i}: 'after' must be seconds (≥ 0), not {after!r}."
            )
        if not isinstance(handler, str) or not handler:
            raise HandlerConfigError(f"violation ladder step {i} names no 'handler': {entry!r}.")
        steps.append(Step(i, float(after), handler, options))
    return sorted(steps, key=lambda s: (s.after, s.index))


@dataclass
class _Case:
    """An ongoing violation: its record id, when it began, what handlers are told."""

    id: int
    since: datetime
    incident: Incident
    host: str
    fired: set[int] = field(default_factory=set)


@dataclass
class _Idle:
    """A reservation seen idle since `since`; `case` once its holder was told."""

    since: datetime
    case: _Case | None = None
    ended: bool = False


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
        end_reservation: Callable[[Reservation], Awaitable[Any]] | None = None,
        handler_types: Mapping[str, type[ViolationHandler] | EntryPoint] | None = None,
        public: bool = False,
    ) -> None:
        self.settings = settings
        self.public = public  # every violation listed to every user (details: involved only)
        self.store = store
        self._run = run
        self._job_owners = job_owners
        self._end_reservation = end_reservation
        try:
            self.policy = DetectionPolicy.build(
                settings.level,
                settings.allow_users,
                settings.allow_commands,
                settings.ghost_mem_mib,
                settings.ghost_util,
            )
        except ValueError as error:
            raise HandlerConfigError(str(error)) from None
        if settings.idle_after < 0 or settings.idle_end_after < 0:
            raise HandlerConfigError("idle times must not be negative.")
        self.ladder = parse_ladder(settings.ladder)
        used = [s.handler for s in self.ladder]
        if settings.idle_after:
            used += list(settings.idle_handlers)
        if settings.noshow_after:
            used += list(settings.noshow_handlers)
        self.handlers = build_handlers(
            settings.handlers, HandlerContext(pool, publish), used, handler_types
        )
        for step in self.ladder:
            self.handlers[step.handler].check_step(step.options)
        self._cases: dict[Hashable, _Case] = {}
        self._idle: dict[int, _Idle] = {}
        self._rate: dict[tuple[str, Hashable], datetime] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = False
        self.noshows = NoShows(self) if settings.noshow_after else None

    def unix_user(self, name: str) -> str:
        """The UNIX user of a gpuhive user (the identity unless configured)."""
        return self.settings.user_map.get(name, name)

    # --- the sweep listener ----------------------------------------------------------------

    async def on_sweep(self, sweep: Sweep) -> None:
        """Detect, record and escalate; register this as a Sampler listener."""
        if self.settings.level == 0 and not self.settings.idle_after and self.noshows is None:
            return
        if not self._ready:
            closed = await self._run(self.store.violations.close_stale)
            if closed:
                log.info("gpuhive: closed %d violation(s) left open by a previous run", closed)
            self._ready = True
        at = sweep.at
        active = await self._run(self.store.reservations.window, at, at + timedelta(microseconds=1))
        owners = await self._job_owners(sweep) if self._job_owners else None
        samples = [s for s in sweep.samples.values() if not s.gpu_error]
        seen = {s.host for s in samples}
        findings = detect(
            samples, active, at, self.policy, job_owners=owners, unix_user=self.unix_user
        )
        await self._track(at, findings, seen, {r.id: r for r in active})
        if self.settings.idle_after:
            await self._track_idle(
                at, idle_reservations(samples, active, at, self.settings.idle_util)
            )
        if self.noshows is not None:
            await self.noshows.track(at, samples, active, owners)
        self._escalate(at, seen)

    async def _track(
        self,
        at: datetime,
        findings: Sequence[Violation],
        seen: set[str],
        held: Mapping[int, Reservation],
    ) -> None:
        now = {f.key: f for f in findings}
        opened = [f for key, f in now.items() if key not in self._cases]
        gone = [k for k, c in self._cases.items() if k not in now and c.host in seen]
        fresh = {
            self._cases[k].id: (f.pids, f.commands) for k, f in now.items() if k in self._cases
        }
        ids = await self._run(
            self.store.violations.sync,
            at,
            opened,
            fresh,
            [self._cases[k].id for k in gone],
        )
        for key in gone:
            case = self._cases.pop(key)
            log.info("gpuhive: violation %d ended (%s on %s)", case.id, case.incident.kind,
                     case.incident.gpu)  # fmt: skip
        for key, f in now.items():
            known = self._cases.get(key)
            if known is not None:
                known.incident = dataclasses.replace(
                    known.incident, pids=f.pids, commands=f.commands, detail=f.detail
                )
        for f, vid in zip(opened, ids, strict=True):
            log.warning("gpuhive: violation %d: %s on %s by %s (pids %s)", vid, f.kind, f.gpu,
                        f.offender or "?", list(f.pids))  # fmt: skip
            res = held.get(f.reservation_id) if f.reservation_id is not None else None
            self._cases[f.key] = _Case(vid, at, self._incident(vid, f, res), f.host)

    def _incident(self, vid: int, v: Violation, res: Reservation | None) -> Incident:
        if res is None:
            return Incident.of(vid, v)
        return Incident.of(vid, v, self.unix_user(res.owner), res.title, res.end)

    # --- escalation -----------------------------------------------------------------------

    def _escalate(self, at: datetime, seen: set[str]) -> None:
        """Fire every due ladder step; repeating handlers fire their latest due step only."""
        for case in self._cases.values():
            if case.host not in seen:
                continue  # host not seen this sweep: nothing is known, nothing is done
            elapsed = (at - case.since).total_seconds()
            repeated: set[str] = set()
            for step in reversed(self.ladder):
                if step.after > elapsed:
                    continue
                handler = self.handlers[step.handler]
                if not handler.applies(case.incident):
                    continue
                if handler.repeat:
                    if handler.name in repeated:
                        continue
                    repeated.add(handler.name)
                elif step.index in case.fired:
                    continue
                key = (handler.name, handler.rate_key(case.incident))
                last = self._rate.get(key)
                if last is not None and (at - last).total_seconds() < handler.interval:
                    continue
                self._rate[key] = at
                case.fired.add(step.index)
                self._fire(case.incident, handler, step.options, step.index)
        self._prune_rates(at)

    def _prune_rates(self, at: datetime) -> None:
        stale = [
            key
            for key, last in self._rate.items()
            if (at - last).total_seconds() >= self.handlers[key[0]].interval
        ]
        for key in stale:
            del self._rate[key]

    def _fire(
        self,
        incident: Incident,
        handler: ViolationHandler,
        step: Mapping[str, Any],
        index: int | None,
    ) -> None:
        task = asyncio.get_running_loop().create_task(
            self._act(incident, handler, step, index), name=f"gpuhive-{handler.name}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        await self._record(incident.violation_id, started, index, handler.name, ok, detail)

    async def _record(
        self, vid: int, at: datetime, step: int | None, handler: str, ok: bool, detail: str
    ) -> None:
        try:
            await self._run(self.store.violations.add_action, vid, at, step, handler, ok, detail)
        except Exception:
            log.exception("gpuhive: could not record the action of %s on violation %d", handler,
                          vid)  # fmt: skip

    # --- idle reservations -------------------------------------------------------------------

    async def _track_idle(self, at: datetime, idle: Mapping[int, Reservation]) -> None:
        s = self.settings
        busy = [rid for rid in self._idle if rid not in idle]
        closed = [c.id for rid in busy if (c := self._idle[rid].case) is not None]
        for rid in busy:
            del self._idle[rid]
        due = []
        for rid, res in idle.items():
            state = self._idle.setdefault(rid, _Idle(at))
            if state.case is None and (at - state.since).total_seconds() >= s.idle_after:
                due.append(res)
        ids: list[int] = []
        if due or closed:
            records = [self._idle_record(r, at) for r in due]
            ids = await self._run(self.store.violations.sync, at, records, None, closed)
        for res, vid in zip(due, ids, strict=True):
            state = self._idle[res.id]
            incident = self._idle_incident(vid, res, state.since)
            state.case = _Case(vid, state.since, incident, res.gpus[0].host)
            log.info("gpuhive: reservation %d of %s is idle since %s", res.id, res.owner,
                     state.since.isoformat())  # fmt: skip
            self._notify_idle(incident, {})
        for rid, res in idle.items():
            state = self._idle[rid]
            limit = s.idle_after + s.idle_end_after
            if (
                s.idle_end
                and state.case is not None
                and not state.ended
                and (at - state.since).total_seconds() >= limit
            ):
                state.ended = True
                task = asyncio.get_running_loop().create_task(
                    self._end_early(res, state.case.incident), name="gpuhive-idle-end"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _idle_record(self, res: Reservation, at: datetime) -> Violation:
        """The idle notice as recorded at `at` (its detail says since when)."""
        refs = ",".join(g.ref for g in res.gpus)
        since = self._idle[res.id].since
        detail = f"idle since {since.isoformat()}"
        return Violation(
            IDLE, res.gpus[0].host, refs, res.gpus[0].uuid, None, res.owner, res.id,
            self.settings.level, (), (), detail, at,
        )  # fmt: skip

    def _idle_incident(self, vid: int, res: Reservation, since: datetime) -> Incident:
        """What handlers are told about an idle reservation: it began when it became idle."""
        record = self._idle_record(res, since)
        return Incident.of(vid, record, self.unix_user(res.owner), res.title, res.end)

    def notify(self, incident: Incident, names: Sequence[str], step: Mapping[str, Any]) -> None:
        """Tell the named handlers that act on it about an incident (once each, no ladder)."""
        for name in names:
            handler = self.handlers[name]
            if handler.applies(incident):
                self._fire(incident, handler, step, None)

    def _notify_idle(self, incident: Incident, step: Mapping[str, Any]) -> None:
        for name in self.settings.idle_handlers:
            handler = self.handlers[name]
            if handler.applies(incident):
                self._fire(incident, handler, step, None)

    async def _end_early(self, res: Reservation, incident: Incident) -> None:
        """End an idle reservation now, record it, and tell the holder."""
        started = utcnow()
        try:
            if self._end_reservation is not None:
                await self._end_reservation(res)
            else:
                await self._run(self.store.reservations.modify, res.id, _end_now)
            ok, detail = True, f"reservation {res.id} ended early at {started.isoformat()}"
        except Exception as error:
            log.warning("gpuhive: could not end idle reservation %d: %s", res.id, error)
            ok, detail = False, f"could not end reservation {res.id}: {error}"
        await self._record(incident.violation_id, started, None, "end-reservation", ok, detail)
        if ok:
            self._notify_idle(incident, {"message": IDLE_ENDED})

    # --- queries and lifecycle ----------------------------------------------------------------

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
        """Stored violations overlapping [start, end), newest first, as `viewer` may see them.

        A non-admin viewer gets the violations they are involved in (holder or offender);
        with `public`, every violation, the others without PIDs, commands and action details.
        """
        if end <= start:
            raise Invalid("The end of the window must be after its start.")
        if not 0 < limit <= MAX_QUERY:
            raise Invalid(f"'limit' must be between 1 and {MAX_QUERY}.")
        unknown = sorted(set(kinds or ()) - set(KINDS))
        if unknown:
            raise Invalid(f"Unknown violation kind(s) {unknown}; known: {', '.join(KINDS)}.")
        involving = None
        if viewer is not None and not viewer.is_admin and not public:
            involving = (viewer.name, self.unix_user(viewer.name))
        found = await self._run(
            self.store.violations.query, start, end, user=user, host=host,
            reservation_id=reservation_id, kinds=kinds, limit=limit, involving=involving,
        )  # fmt: skip
        return self._visible([v.to_json() for v in found], viewer, public)

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
        found = await self.history(
            start, end, user=user, host=host, reservation_id=reservation_id, kinds=kinds,
            limit=limit, viewer=viewer, public=self.public,
        )  # fmt: skip
        return {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "ongoing": self.ongoing(viewer, self.public),
            "violations": found,
        }

    async def of_reservation(self, reservation_id: int, viewer: Identity) -> list[dict[str, Any]]:
        """A reservation's violations and idle notices, as `viewer` may see them."""
        return await self.for_reservation(reservation_id, viewer, self.public)

    async def for_reservation(
        self, reservation_id: int, viewer: Identity | None = None, public: bool = False
    ) -> list[dict[str, Any]]:
        """A reservation's violations and idle notices, oldest first, as `viewer` may see them."""
        found = await self._run(self.store.violations.for_reservation, reservation_id)
        return self._visible([v.to_json() for v in found], viewer, public)

    def ongoing(self, viewer: Identity | None = None, public: bool = False) -> list[dict[str, Any]]:
        """The violations open right now (live state, no database), as `viewer` may see them."""
        return self._visible(
            [{**c.incident.to_json(), "since": c.since.isoformat()} for c in self._cases.values()],
            viewer,
            public,
        )

    def involves(self, viewer: Identity, holder: str | None, offender: str | None) -> bool:
        """Whether `viewer` holds the reserved GPU or (as their UNIX user) is the offender."""
        return holder == viewer.name or (
            offender is not None and offender == self.unix_user(viewer.name)
        )

    def _visible(
        self, items: list[dict[str, Any]], viewer: Identity | None, public: bool
    ) -> list[dict[str, Any]]:
        """Admins (and None: the server itself) see all; others their own, or all if public
        but then without the PIDs, command lines and action details of other people's."""
        if viewer is None or viewer.is_admin:
            return items
        shown = []
        for item in items:
            if self.involves(viewer, item.get("holder"), item.get("offender")):
                shown.append(item)
            elif public:
                brief = {k: v for k, v in item.items() if k not in ("pids", "commands")}
                if "actions" in brief:
                    brief["actions"] = [
                        {k: v for k, v in a.items() if k != "detail"} for a in brief["actions"]
                    ]
                shown.append(brief)
        return shown

    async def stop(self) -> None:
        """Cancel handler calls still running."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until the handler calls started so far are done (tests, benchmarks)."""
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)


def _end_now(old: Reservation) -> Changes:
    now = utcnow()
    return Changes(end=now) if old.start < now < old.end else Changes()
