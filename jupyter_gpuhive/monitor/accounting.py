"""Metering: after each sweep, charge what every GPU did since its previous sample.

Per GPU and interval between two consecutive samples (t0, t1]:

- who pays: the holder of a reservation on the GPU at t1 (kind 'reserved'), unless a
  preemptible job runs on it on loan from that reservation: then the job's owner ('queued',
  never the lender); else the owner
  of a gpuhive job running on it ('queued' for a queued job, 'job' otherwise); else the users
  whose processes run on it, each an equal share ('unreserved'); else nobody ('idle', payer
  ''). A GPU held in shares (#44) is charged to each share's holder for that share of it
  ('reserved'), and what no share holds then to nobody ('idle'). Every second of every GPU
  is charged to exactly one payer (or split among them), so per-user totals add up to the
  site's.
- used: the whole interval when a process ran on the GPU at t1 or its utilisation was at
  least `idle_util` percent; utilisation-weighted: the interval × utilisation at t1.
- unrated: an interval whose utilisation the driver did not report (a GPU in MIG mode) adds
  nothing to the utilisation-weighted time and counts as `unrated_seconds`: unknown is
  neither idle nor busy, and efficiency is computed over the rated time only.
- energy: the power draw integrated with the trapezoid rule, (p0 + p1) / 2 × (t1 − t0).
  When either reading is missing ([N/A], not supported) the interval's time is kept but its
  energy is not: it counts as unmetered time.
- gaps: an interval longer than `max_gap` (host down, probe failed, gpuhive not running) is
  charged nothing at all, neither time nor energy: the GPU's state then is unknown, and
  neither an average nor the last reading is made up for it. The next sample starts anew.
  The report shows measured hours, so gaps stay visible.

The interval is charged to the hour (UTC) and the month (site time) of t1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..hosts.probe import HostSample
from ..model import Reservation
from ..model.activity import IDLE_UTIL, gpu_busy
from ..store import Store
from ..store.accounting import IDLE, JOB, QUEUED, RESERVED, UNRESERVED, Charge, RunningTask
from .sampler import Sweep

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading:
    """One GPU at one sample: when, its power and load, and the UNIX users on it."""

    at: datetime
    power_w: float | None
    util: float | None
    users: frozenset[str]


def month_of(instant: datetime, zone: tzinfo) -> datetime:
    """The first instant of the (site-local) month `instant` falls in."""
    local = instant.astimezone(zone)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0).astimezone(
        instant.tzinfo
    )


def energy_j(before: Reading, after: Reading) -> float | None:
    """Joules between two readings (trapezoid rule); None when a power reading is missing."""
    if before.power_w is None or after.power_w is None:
        return None
    seconds = (after.at - before.at).total_seconds()
    return (before.power_w + after.power_w) / 2 * seconds


def readings(sample: HostSample) -> dict[str, Reading]:
    """Each GPU of a healthy sample by UUID; processes on MIG slices count for their GPU."""
    if sample.gpu_error:
        return {}
    parent = {mig: gpu for gpu, migs in sample.mig_uuids.items() for mig in migs}
    users: dict[str, set[str]] = {}
    for proc in sample.processes:
        if proc.gpu_uuid and proc.user:
            users.setdefault(parent.get(proc.gpu_uuid, proc.gpu_uuid), set()).add(proc.user)
    return {
        g.uuid: Reading(sample.taken_at, g.power_w, g.util_gpu, frozenset(users.get(g.uuid, ())))
        for g in sample.gpus
    }


@dataclass(frozen=True)
class Payers:
    """Who holds what at a sweep: reservations and running job tasks by GPU UUID."""

    holders: Mapping[str, Reservation]
    tasks: Mapping[str, RunningTask]
    user_of: Callable[[str], str]  # UNIX user → gpuhive user
    lent: frozenset[int] = frozenset()  # jobs on GPUs a reservation lends: they pay
    shares: Mapping[str, tuple[Reservation, ...]] = field(default_factory=dict)  # by GPU UUID

    @classmethod
    def at(
        cls,
        instant: datetime,
        active: Sequence[Reservation],
        tasks: Sequence[RunningTask],
        user_of: Callable[[str], str],
        lent: frozenset[int] = frozenset(),
    ) -> Payers:
        live = [r for r in active if not r.cancelled and r.start <= instant < r.end]
        held = {g.uuid: r for r in live if not r.is_share for g in r.gpus}
        shares: dict[str, tuple[Reservation, ...]] = {}
        for r in live:
            if r.is_share:
                for g in r.gpus:
                    shares[g.uuid] = (*shares.get(g.uuid, ()), r)
        tasks_by_gpu = {uuid: t for t in tasks for uuid in t.gpus}
        return cls(held, tasks_by_gpu, user_of, lent, shares)


def charge(
    gpu_id: int,
    uuid: str,
    before: Reading,
    after: Reading,
    payers: Payers,
    zone: tzinfo,
    idle_util: float = IDLE_UTIL,
) -> list[Charge]:
    """The charges of one GPU for the interval between two of its readings."""
    seconds = (after.at - before.at).total_seconds()
    if seconds <= 0:
        return []
    joules = energy_j(before, after)
    busy = gpu_busy(bool(after.users), after.util, idle_util) is True
    figures: dict[str, Any] = {
        "seconds": seconds,
        "used_seconds": seconds if busy else 0.0,
        "util_seconds": seconds * (after.util or 0) / 100,
        "unrated_seconds": seconds if after.util is None else 0.0,
        "energy_j": joules or 0.0,
        "unmetered_seconds": 0.0 if joules is not None else seconds,
    }
    hour = after.at.replace(minute=0, second=0, microsecond=0)
    month = month_of(after.at, zone)
    shared = payers.shares.get(uuid)
    if shared:
        return _shared(gpu_id, hour, month, shared, figures)
    holder, task = payers.holders.get(uuid), payers.tasks.get(uuid)
    subjects: tuple[tuple[str, int], ...] = (("job", task.job_id),) if task else ()
    if holder is not None and task is not None and task.job_id in payers.lent:
        who = [(task.owner, QUEUED)]  # a preemptible job on lent GPUs: never the lender
        subjects = (("reservation", holder.id), *subjects)
    elif holder is not None:
        who = [(holder.owner, RESERVED)]
        subjects = (("reservation", holder.id), *subjects)
    elif task is not None:
        who = [(task.owner, QUEUED if task.queued else JOB)]
    elif after.users:
        who = [(payers.user_of(u), UNRESERVED) for u in sorted(after.users)]
    else:
        who = [("", IDLE)]
    share = 1 / len(who)
    return [
        Charge(gpu_id, hour, month, payer, kind,
               subjects=subjects, **{k: v * share for k, v in figures.items()})
        for payer, kind in who
    ]  # fmt: skip


def _shared(
    gpu_id: int,
    hour: datetime,
    month: datetime,
    shares: Sequence[Reservation],
    figures: Mapping[str, float],
) -> list[Charge]:
    """A GPU held in shares: each holder pays their share of it, nobody the rest."""
    parts: list[tuple[str, str, float, tuple[tuple[str, int], ...]]] = [
        (r.owner, RESERVED, r.share, (("reservation", r.id),)) for r in shares
    ]
    rest = 1.0 - sum(part for _, _, part, _ in parts)
    if rest > 1e-9:
        parts.append(("", IDLE, rest, ()))
    return [
        Charge(gpu_id, hour, month, payer, kind,
               subjects=subjects, **{k: v * part for k, v in figures.items()})
        for payer, kind, part, subjects in parts
    ]  # fmt: skip


class Meter:
    """A sweep listener that charges each GPU's time, use and energy (the leader runs it)."""

    def __init__(
        self,
        store: Store,
        run: Callable[..., Any],
        zone: tzinfo,
        *,
        max_gap: float,
        idle_util: float = IDLE_UTIL,
        user_of: Callable[[str], str] = lambda name: name,
    ) -> None:
        self.store = store
        self._run = run
        self.zone = zone
        self.max_gap = max_gap
        self.idle_util = idle_util
        self.user_of = user_of
        self._last: dict[str, Reading] = {}

    async def on_sweep(self, sweep: Sweep) -> None:
        """Charge the intervals that ended with this sweep's samples."""
        now = {uuid: r for s in sweep.samples.values() for uuid, r in readings(s).items()}
        if not now:
            return
        at = sweep.at
        active = await self._run(
            self.store.reservations.window,
            at - timedelta(seconds=self.max_gap),
            at + timedelta(seconds=1),
        )
        tasks = await self._run(self.store.accounting.running_tasks)
        loans = await self._run(self.store.preemption.open_loans)
        charges = self.charges(now, active, tasks, frozenset(loan.job_id for loan in loans))
        if charges:
            await self._run(self.store.accounting.record, charges)

    def charges(
        self,
        now: Mapping[str, Reading],
        active: Sequence[Reservation],
        tasks: Sequence[RunningTask],
        lent: frozenset[int] = frozenset(),
    ) -> list[Charge]:
        """The charges between the previous readings and `now` (and remember `now`); the
        jobs in `lent` run on GPUs a reservation lends them: their owners pay, not the holder."""
        inventory = self.store.inventory
        out: list[Charge] = []
        payers_at: dict[datetime, Payers] = {}
        for uuid, after in now.items():
            before, self._last[uuid] = self._last.get(uuid), after
            gpu = inventory.gpu(uuid)
            if before is None or gpu is None:
                continue
            if (after.at - before.at).total_seconds() > self.max_gap:
                log.debug("gpuhive: %s was not seen for %s; the gap is not charged", uuid,
                          after.at - before.at)  # fmt: skip
                continue
            payers = payers_at.get(after.at)
            if payers is None:
                payers = payers_at[after.at] = Payers.at(after.at, active, tasks, self.user_of,
                                                         lent)  # fmt: skip
            out.extend(charge(gpu.id, uuid, before, after, payers, self.zone, self.idle_util))
        return out
