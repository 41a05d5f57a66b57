"""No-show release: reservations their holder never used after they began.

A reservation is a no-show when, within `noshow_after` of its start, no process of its owner
appeared on any of its GPUs: a process of the owner's UNIX user (their kernels and shells run
as them), or a process of one of their gpuhive jobs. The owner is told through the no-show
handlers (the protection handlers: 'event', 'email', 'terminal', 'webhook', ...). When still
no such process has appeared `noshow_release_after` later, the rest of the reservation is
released: its end moves to now; the reservation keeps its id and start, and the notice stays
in the violation history (kind 'no-show') with the release among its actions. A process of
the owner that appears before the release keeps the reservation (the notice is closed).

Only reservations watched from their start are judged (a server that starts, or takes over
as leader, in the middle of one cannot know what happened before), and a reservation on a
host the sweep did not see is left alone. This is not idle detection: a reservation whose
owner ran something and stopped is idle, not a no-show; one whose GPUs someone else keeps
busy is a no-show, not idle. Off by default; `make demo` turns it on.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from ..hosts.probe import HostSample
from ..model import Reservation, describe_instant, utcnow
from ..model.hostgroups import NoShowTimes
from ..model.violations import NO_SHOW, Violation
from ..store import Store
from .actions import Actions, EndReservation, Run
from .config import ProtectionSettings
from .handlers import Incident
from .violations import JobOwners

log = logging.getLogger(__name__)

RELEASED = (
    "Your reservation {reservation} ('{title}') was released: no process of yours ran on its "
    "GPUs {gpu} after it began at {since}. They are free for others now."
)
RELEASED_NO_SHOW = "released: no-show"  # the reason the reservation's change event gives
WATCH_SLACK = timedelta(seconds=60)  # a reservation that began this much before we watched


def attended(
    res: Reservation,
    samples: dict[str, HostSample],
    job_owners: JobOwners,
    unix_user: str,
) -> bool | None:
    """Whether a process of the owner runs on a GPU of `res`; None if a host was not seen."""
    uuids = {g.uuid for g in res.gpus}
    for host in {g.host for g in res.gpus}:
        sample = samples.get(host)
        if sample is None or sample.gpu_error:
            return None
        parent = {mig: gpu for gpu, migs in sample.mig_uuids.items() for mig in migs}
        for proc in sample.processes:
            gpu = parent.get(proc.gpu_uuid or "", proc.gpu_uuid)
            if gpu not in uuids and proc.mig_uuid not in uuids:  # on the GPU or my MIG slice
                continue
            if proc.user in (unix_user, res.owner) or job_owners.get((host, proc.pid)) == res.owner:
                return True
    return False


@dataclass
class _Notice:
    """A reservation told it is a no-show: its record and what handlers were told."""

    id: int
    incident: Incident
    released: bool = False


class NoShows:
    """Tracks running reservations until their owner shows up, tells, then releases."""

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
        s = self.settings = settings
        self.zone = zone  # the site's: times in details read on its clock
        self.actions = actions
        self.store = store
        self._run = run
        self._unix_user = unix_user
        self._end_reservation = end_reservation
        self.site = NoShowTimes.of_seconds(s.noshow_after, s.noshow_release_after)
        self.group_of = s.host_group  # a host's group (None: the site has no host groups)
        self.by_group: dict[str, NoShowTimes] = {}  # the groups' own, read each sweep
        self.handlers = tuple(s.noshow_handlers)
        self._watching_since: datetime | None = None
        self._settled: set[int] = set()  # attended, or not judged: nothing more to do
        self._notices: dict[int, _Notice] = {}

    async def refresh(self) -> bool:
        """Read the host groups' own no-show times; whether no-shows are watched anywhere."""
        if self.group_of is not None:
            stored = await self._run(self.store.host_groups.all)
            self.by_group = {g: v.noshow for g, v in stored.items() if not v.noshow.empty}
        watching = bool(self.site.after) or any(t.after for t in self.by_group.values())
        if not watching:  # turned on again later: judge only what begins from then on
            self._watching_since = None
        return watching

    def times(self, res: Reservation) -> tuple[timedelta, timedelta]:
        """After how long `res` is a no-show (zero: not watched) and how much later it is
        released: its first GPU's host group's times, the site's where it sets none."""
        group = self.group_of(res.gpus[0].host) if self.group_of is not None else None
        times = self.by_group.get(group or "", NoShowTimes()).over(self.site)
        return times.after or timedelta(0), times.release_after or timedelta(0)

    async def track(
        self,
        at: datetime,
        samples: Sequence[HostSample],
        active: Sequence[Reservation],
        owners: JobOwners | None,
    ) -> None:
        """Judge the running reservations after one sweep."""
        if self._watching_since is None:
            self._watching_since = at
        by_host = {s.host: s for s in samples}
        running = {r.id: r for r in active if not r.cancelled and r.start <= at < r.end}
        for rid in [rid for rid in self._settled if rid not in running]:
            self._settled.discard(rid)
        for rid in [rid for rid in self._notices if rid not in running]:
            del self._notices[rid]
        for res in running.values():
            if res.id in self._settled or not res.gpus:
                continue
            if res.start < self._watching_since - WATCH_SLACK:
                self._settled.add(res.id)  # began before we watched: not ours to judge
                continue
            after, release_after = self.times(res)
            if res.tentative or not after:  # tentative: nothing may run on it until approved
                self._settled.add(res.id)  # (#46); no `after`: not watched on its host
                continue
            unix = self._unix_user(res.owner)
            present = attended(res, by_host, owners or {}, unix)
            if present is None:
                continue
            notice = self._notices.get(res.id)
            if present:
                self._settled.add(res.id)
                if notice is not None and not notice.released:
                    del self._notices[res.id]
                    await self._run(self.store.violations.sync, at, (), None, [notice.id])
                continue
            elapsed = at - res.start
            if notice is None and elapsed >= after:
                await self._notice(res, at)
            elif notice is not None and not notice.released and elapsed >= after + release_after:
                notice.released = True
                await self._release_now(res, notice, at)

    async def _notice(self, res: Reservation, at: datetime) -> None:
        refs = ",".join(g.ref for g in res.gpus)
        record = Violation(
            NO_SHOW, res.gpus[0].host, refs, res.gpus[0].uuid, None, res.owner, res.id,
            self.settings.level, (), (),
            f"no process of {res.owner} since the start at "
            f"{describe_instant(res.start, self.zone)}", at,
        )  # fmt: skip
        (vid,) = await self._run(self.store.violations.sync, at, [record], None, ())
        since = dataclasses.replace(record, started_at=res.start)
        unix = self._unix_user(res.owner)
        incident = Incident.of(vid, since, unix, res.title, res.end, self.zone)
        self._notices[res.id] = _Notice(vid, incident)
        log.info("gpuhive: reservation %d of %s is a no-show", res.id, res.owner)
        self.actions.notify(incident, self.handlers, {})

    async def _release_now(self, res: Reservation, notice: _Notice, at: datetime) -> None:
        store = self.store
        started = utcnow()
        try:
            await self._end_reservation(res, RELEASED_NO_SHOW)  # through the bookings service
            when = describe_instant(started, self.zone)
            ok, detail = True, f"reservation {res.id} released at {when}"
        except Exception as error:
            log.warning("gpuhive: could not release no-show reservation %d: %s", res.id, error)
            ok, detail = False, f"could not release reservation {res.id}: {error}"
        await self._run(
            store.violations.add_action, notice.id, started, None, "release", ok, detail
        )
        if ok:
            await self._run(store.violations.sync, at, (), None, [notice.id])
            self.actions.notify(notice.incident, self.handlers, {"message": RELEASED})
