"""The escalation ladder: open violations, and the ladder steps fired for each as time passes.

Each sweep's findings open, refresh or close the violation records in one write; then every
ladder step that is due fires, at most once per step (repeating handlers: their latest due
step only), and no handler more often than its interval allows for the same target.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo

from ..model import Reservation
from ..model.violations import Violation, ViolationRecord
from ..store import Store
from .actions import Actions, Run
from .config import Step
from .handlers import Incident

log = logging.getLogger(__name__)


@dataclass
class Case:
    """An ongoing violation: its record id, when it began, what handlers are told."""

    id: int
    since: datetime
    incident: Incident
    host: str
    fired: set[int] = field(default_factory=set)


class Escalation:
    """The open violations and the ladder's state for each."""

    def __init__(
        self,
        ladder: Sequence[Step],
        actions: Actions,
        store: Store,
        run: Run,
        unix_user: Callable[[str], str],
        zone: tzinfo = UTC,
    ) -> None:
        self.ladder = ladder
        self.zone = zone  # the site's: times in messages read on its clock
        self.actions = actions
        self.handlers = actions.handlers
        self.store = store
        self._run = run
        self._unix_user = unix_user
        self.cases: dict[Hashable, Case] = {}  # by the finding's key
        self._rate: dict[tuple[str, Hashable], datetime] = {}

    async def track(
        self,
        at: datetime,
        findings: Sequence[Violation],
        seen: set[str],
        held: Mapping[int, Reservation],
    ) -> list[int]:
        """Open, refresh and close cases after one sweep (hosts not `seen` keep theirs); the
        ids of the violations it opened."""
        now = {f.key: f for f in findings}
        opened = [f for key, f in now.items() if key not in self.cases]
        gone = [k for k, c in self.cases.items() if k not in now and c.host in seen]
        fresh = {self.cases[k].id: (f.pids, f.commands) for k, f in now.items() if k in self.cases}
        ids = await self._run(
            self.store.violations.sync,
            at,
            opened,
            fresh,
            [self.cases[k].id for k in gone],
        )
        for key in gone:
            case = self.cases.pop(key)
            log.info("gpuhive: violation %d ended (%s on %s)", case.id, case.incident.kind,
                     case.incident.gpu)  # fmt: skip
        for key, f in now.items():
            known = self.cases.get(key)
            if known is not None:
                known.incident = dataclasses.replace(
                    known.incident, pids=f.pids, commands=f.commands, detail=f.detail
                )
        for f, vid in zip(opened, ids, strict=True):
            log.warning("gpuhive: violation %d: %s on %s by %s (pids %s)", vid, f.kind, f.gpu,
                        f.offender or "?", list(f.pids))  # fmt: skip
            res = held.get(f.reservation_id) if f.reservation_id is not None else None
            self.cases[f.key] = Case(vid, at, self._incident(vid, f, res), f.host)
        return list(ids)

    def resume(self, records: Sequence[ViolationRecord], held: Mapping[int, Reservation]) -> None:
        """Continue violations another leader opened: the same records, the ladder steps its
        recorded actions took counted as fired, each handler's interval counted from its last
        action (`held`: the reservations involved, by id)."""
        for r in records:
            res = held.get(r.reservation_id) if r.reservation_id is not None else None
            incident = self._incident(r.id, r, res)
            fired = {a.step for a in r.actions if a.step is not None}
            self.cases[r.key] = Case(r.id, r.started_at, incident, r.host, fired)
            for action in r.actions:
                handler = self.handlers.get(action.handler)
                if handler is None or not handler.interval:
                    continue
                key = (handler.name, handler.rate_key(incident))
                if key not in self._rate or self._rate[key] < action.at:
                    self._rate[key] = action.at
            log.info("gpuhive: violation %d (%s on %s) continues, ladder steps taken: %s",
                     r.id, r.kind, r.gpu, sorted(fired))  # fmt: skip

    def forget(self) -> None:
        """Drop the open cases and handler intervals (leadership lost: another leader goes on)."""
        self.cases.clear()
        self._rate.clear()

    def _incident(self, vid: int, v: Violation, res: Reservation | None) -> Incident:
        if res is None:
            return Incident.of(vid, v, zone=self.zone)
        return Incident.of(vid, v, self._unix_user(res.owner), res.title, res.end, self.zone)

    def escalate(self, at: datetime, seen: set[str]) -> None:
        """Fire every due ladder step; repeating handlers fire their latest due step only."""
        for case in self.cases.values():
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
                self.actions.fire(case.incident, handler, step.options, step.index)
        self._prune_rates(at)

    def _prune_rates(self, at: datetime) -> None:
        stale = [
            key
            for key, last in self._rate.items()
            if (at - last).total_seconds() >= self.handlers[key[0]].interval
        ]
        for key in stale:
            del self._rate[key]
