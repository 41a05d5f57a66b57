"""Idle reservations: their holder is told, and (when the policy says so) they end early.

A reservation whose GPUs stay idle for `idle_after` gets an idle notice (kind 'idle'), sent
through the idle handlers; with `idle_end`, one still idle `idle_end_after` later is ended
now, which the notice's history records. GPUs that get busy again close the notice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from ..model import Reservation, describe_instant, utcnow
from ..model.violations import Violation, ViolationRecord
from ..store import Store
from .actions import Actions, EndReservation, Run
from .config import ProtectionSettings
from .escalation import Case
from .handlers import Incident
from .violations import IDLE

log = logging.getLogger(__name__)

IDLE_SINCE = "idle since "  # the notice's detail: this, then the time on the site's clock
ENDED_IDLE = "ended early: idle"  # the reason the reservation's change event gives
IDLE_ENDED = (
    "Your reservation {reservation} ('{title}') was ended early because its GPUs {gpu} were "
    "idle since {since}; they are free for others now."
)


@dataclass
class _Idle:
    """A reservation seen idle since `since`; `case` once its holder was told."""

    since: datetime
    case: Case | None = None
    ended: bool = False


class IdleWatch:
    """Tracks idle reservations from sweep to sweep, tells their holders, ends them early."""

    def __init__(
        self,
        settings: ProtectionSettings,
        actions: Actions,
        store: Store,
        run: Run,
        unix_user: Callable[[str], str],
        end_reservation: EndReservation,
        zone: tzinfo = UTC,
    ) -> None:
        self.settings = settings
        self.zone = zone  # the site's: times in details read on its clock
        self.actions = actions
        self.store = store
        self._run = run
        self._unix_user = unix_user
        self._end_reservation = end_reservation
        self._idle: dict[int, _Idle] = {}

    async def track(self, at: datetime, idle: Mapping[int, Reservation]) -> None:
        """Update the idle reservations after one sweep (`idle`: those idle now, by id)."""
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
            records = [self._record(r, at) for r in due]
            ids = await self._run(self.store.violations.sync, at, records, None, closed)
        for res, vid in zip(due, ids, strict=True):
            state = self._idle[res.id]
            incident = self._incident(vid, res, state.since)
            state.case = Case(vid, state.since, incident, res.gpus[0].host)
            log.info("gpuhive: reservation %d of %s is idle since %s", res.id, res.owner,
                     state.since.isoformat())  # fmt: skip
            self.actions.notify(incident, s.idle_handlers, {})
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
                self.actions.spawn(self._end_early(res, state.case.incident), "gpuhive-idle-end")

    def resume(self, records: Mapping[int, tuple[ViolationRecord, Reservation]]) -> None:
        """Continue the idle notices another leader sent (by reservation id): not sent again,
        and ended early when due unless that leader did (its 'end-reservation' action)."""
        for rid, (record, res) in records.items():
            since = idle_since(record.detail or "", self.zone, record.started_at)
            case = Case(record.id, since, self._incident(record.id, res, since), record.host)
            ended = any(a.handler == "end-reservation" for a in record.actions)
            self._idle[rid] = _Idle(since, case, ended)

    def forget(self) -> None:
        """Drop what is tracked (leadership lost: another leader goes on)."""
        self._idle.clear()

    def _record(self, res: Reservation, at: datetime) -> Violation:
        """The idle notice as recorded at `at` (its detail says since when)."""
        refs = ",".join(g.ref for g in res.gpus)
        since = self._idle[res.id].since
        detail = IDLE_SINCE + describe_instant(since, self.zone)
        return Violation(
            IDLE, res.gpus[0].host, refs, res.gpus[0].uuid, None, res.owner, res.id,
            self.settings.level, (), (), detail, at,
        )  # fmt: skip

    def _incident(self, vid: int, res: Reservation, since: datetime) -> Incident:
        """What handlers are told about an idle reservation: it began when it became idle."""
        record = self._record(res, since)
        return Incident.of(vid, record, self._unix_user(res.owner), res.title, res.end, self.zone)

    async def _end_early(self, res: Reservation, incident: Incident) -> None:
        """End an idle reservation now, record it, and tell the holder."""
        started = utcnow()
        try:
            await self._end_reservation(res, ENDED_IDLE)  # through the bookings service
            when = describe_instant(started, self.zone)
            ok, detail = True, f"reservation {res.id} ended early at {when}"
        except Exception as error:
            log.warning("gpuhive: could not end idle reservation %d: %s", res.id, error)
            ok, detail = False, f"could not end reservation {res.id}: {error}"
        await self.actions.record(
            incident.violation_id, started, None, "end-reservation", ok, detail
        )
        if ok:
            self.actions.notify(incident, self.settings.idle_handlers, {"message": IDLE_ENDED})


def idle_since(detail: str, zone: tzinfo, otherwise: datetime) -> datetime:
    """Since when a recorded idle notice's GPUs were idle, read back from its detail (its
    minute on the site's clock, taken at its last second: never earlier than it was; an ISO
    time as older versions wrote); `otherwise` when the detail does not say."""
    text = detail.removeprefix(IDLE_SINCE)
    if text == detail:
        return otherwise
    try:
        local = datetime.strptime(text, "%a %Y-%m-%d %H:%M").replace(tzinfo=zone)
        return local.astimezone(UTC) + timedelta(seconds=59)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return otherwise
