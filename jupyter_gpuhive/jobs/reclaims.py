"""The queue's part for preemptible jobs: the second admission pass on lent GPUs, the
loans it opens, ends and reclaims, the preemptions for new jobs (least attained service,
`attained`), and the jobs put back in the queue after a reclaim or a preemption.

`Scheduler` (jobs/queue.py) is a `Reclaims`: the tick calls `_borrowing`, `_reclaimed`,
`_lending_pass`, `_in_flight` and `_least_served`; kernels and the API call `make_way`,
`reclaim` and `reclaim_reservation`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..model import Reservation
from ..model.jobs import ACTIVE, Job, TaskState
from ..monitor.sampler import Sweep
from ..store import Store
from ..store.preemption import EXHAUSTED, RESUMED
from .admission import Candidate, GpuState, PassResult, Slot, admit
from .attained import Runner, Takeover, takeovers
from .launcher import Launcher
from .order import walltime
from .plan import when
from .preemption import (
    PREEMPT_PATIENCE,
    PreemptionSettings,
    borrowers,
    free_by,
    holder_process,
    job_groups,
    judge,
    lending_states,
    samples_of,
)
from .queue_inputs import RuleCheck, Snapshot, served

if TYPE_CHECKING:
    from datetime import timedelta, tzinfo

log = logging.getLogger("jupyter_gpuhive.jobs.queue")
T = TypeVar("T")


class Reclaims:
    """Loans of reserved GPUs to preemptible jobs, as the scheduler keeps them."""

    store: Store
    launcher: Launcher
    preemption: PreemptionSettings
    clock: Callable[[], datetime]
    zone: tzinfo
    horizon: timedelta
    unix_user: Callable[[str], str]
    preempted: Callable[[dict[str, Any]], Any]
    _sweep: Sweep | None
    _stopping: dict[int, asyncio.Task[None]]
    _stop_later: Callable[..., None]  # the scheduler's: stop a job in the background
    _plan: dict[int, Slot]  # the slots the last pass kept
    # Preemptions for new jobs under way: job -> (the jobs it preempted, the GPUs it takes,
    # when they are free at the latest).
    _takeovers: dict[int, tuple[tuple[int, ...], tuple[str, ...], float]]

    def _lending_pass(self, snap: Snapshot, queued: list[Candidate], first: Any) -> list[Any]:
        """The second pass: preemptible jobs the first left waiting, on lent GPUs too."""
        if snap.lending is None:
            return []
        by_id = {job.id: job for job in snap.jobs}
        started = {a.job_id for a in first.admitted}
        wanting = [c for c in borrowers(queued, by_id, self.preemption) if c.job_id not in started]
        if not wanting:
            return []
        now = snap.now.timestamp()
        taken = [uuid for a in first.admitted for uuid in a.gpus]
        mine = {c.job_id for c in wanting}  # their own slots: they may start now instead
        kept = [(slot.start, slot.end, slot.gpus) for job_id, slot in first.planned.items()
                if job_id not in mine]  # fmt: skip
        states, spans = lending_states(snap.gpus, snap.reserved, snap.lending, self.preemption,
                                       now, taken, kept)  # fmt: skip
        until = (snap.now + self.horizon).timestamp()
        second = admit(wanting, states, now, access=RuleCheck(snap, self.zone), reserved=spans,
                       depth=0, horizon=until)  # fmt: skip
        return list(second.admitted)

    def _open_loans(self, job_id: int, gpus: Sequence[str], snap: Snapshot, lead: float) -> None:
        """Open the loans of the lending bookings on `gpus` that begin within `lead`."""
        lending = snap.lending
        assert lending is not None
        at = snap.now.timestamp()
        for res in lending.on(gpus, at, at + lead):
            mine = set(gpus).intersection(g.uuid for g in res.gpus)
            self.store.preemption.lend(job_id, res.id, mine, snap.now)

    async def reclaim(self, job: Job, why: str, reservation: int) -> bool:
        """Take lent GPUs back from a job: its signal now, its grace, then the ladder; it is
        requeued once stopped. False when a reclaim of it is already under way."""
        grace = self.preemption.grace(job)
        now = self.clock()
        done = await in_thread(self.store.preemption.reclaim, job.id, now, why, job.preempt_signal,
                         grace)  # fmt: skip
        if not done:
            return False
        log.info("gpuhive queue: reclaiming job %s: %s", job.id, why)
        self._stop_later(job.id, why, requeue=True, preempt=(job.preempt_signal, grace))
        self.preempted({"job": job.id, "owner": job.owner, "reservation": reservation,
                        "signal": job.preempt_signal, "grace_s": grace,
                        "restarts": job.restarts + 1})  # fmt: skip
        return True

    async def reclaim_reservation(self, reservation: int, why: str) -> tuple[list[int], datetime]:
        """The holder asked for the GPUs ("I need my GPUs now"): every loan of the booking
        is reclaimed; the jobs signalled, and when all are gone. That it lends no more is
        the bookings service's part (Jobs.reclaim asks it first)."""
        loans = await in_thread(self.store.preemption.open_loans, reservation)
        now = self.clock()
        latest = now
        jobs: list[int] = []
        for loan in loans:
            job = await in_thread(self.store.jobs.get, loan.job_id)
            if loan.reclaimed_at is None:
                await self.reclaim(job, why, reservation)
            latest = max(latest, free_by(loan.reclaimed_at or now, self.preemption.grace(job)))
            jobs.append(job.id)
        return jobs, latest

    async def _before_start(self, job: Job) -> None:
        """Before one of a holder's jobs starts: reclaim the GPUs it needs from borrowers and
        wait for them (at most their grace and the kill patience, then it starts anyway)."""
        await self.make_way(job.owner, job.gpus, f"{job.owner} starts job {job.id} on a lent GPU",
                            but=job.id)  # fmt: skip

    async def make_way(self, owner: str, gpus: Sequence[str], why: str, but: int = 0) -> None:
        """Reclaim the loans on `gpus` of `owner`'s reservations (job `but` excepted) and
        wait for their jobs to go (at most their grace and the kill patience)."""
        wanted = set(gpus)
        if not wanted:
            return
        loans = [loan for loan in await in_thread(self.store.preemption.open_loans)
                 if loan.job_id != but and wanted.intersection(loan.gpus)]  # fmt: skip
        waits = []
        for loan in loans:
            res = await in_thread(self.store.reservations.get, loan.reservation_id)
            if res.owner != owner:
                continue
            other = await in_thread(self.store.jobs.get, loan.job_id)
            await self.reclaim(other, why, res.id)
            if other.id in self._stopping:
                waits.append(self._stopping[other.id])
        if waits:
            limit = self.preemption.grace_s + PREEMPT_PATIENCE + self.launcher.timeout
            await asyncio.wait(waits, timeout=limit)

    async def lent_processes(self, sweep: Sweep) -> dict[tuple[str, int], int]:
        """GPU processes of jobs on loan: (host, pid) -> the reservation that lends."""

        def read() -> dict[tuple[str, int], int]:
            loans = self.store.preemption.open_loans()
            if not loans:
                return {}
            by_job = {loan.job_id: loan.reservation_id for loan in loans}
            groups = {(t.host, t.pgid): by_job[t.job_id] for t in
                      self.store.jobs.tasks(ACTIVE) if t.job_id in by_job and t.pgid}  # fmt: skip
            return {
                (host, proc.pid): groups[(host, proc.pgid)]
                for host, sample in sweep.samples.items()
                for proc in sample.processes
                if proc.pgid is not None and (host, proc.pgid) in groups
            }

        return await in_thread(read)

    async def _lent(self) -> list[tuple[Job, Reservation]]:
        """(job, reservation) of each loan the watch looks after: open, not reclaimed, of a
        reservation that is active now."""

        def read() -> list[tuple[Job, Reservation]]:
            now = self.clock()
            out = []
            for loan in self.store.preemption.open_loans():
                if loan.reclaimed_at is not None:
                    continue
                res = self.store.reservations.get(loan.reservation_id)
                if not res.cancelled and res.start <= now < res.end:
                    out.append((self.store.jobs.get(loan.job_id), res))
            return out

        return await in_thread(read)

    async def _borrowing(
        self, job: Job, snap: Snapshot, stopping: dict[int, str], lead: float
    ) -> bool:
        """A running preemptible job: open its loans, end those that are over, reclaim, or
        requeue it before a booking that does not lend (`stopping`: the tick report's jobs
        being stopped, and why); whether the store changed."""
        lending = snap.lending
        assert lending is not None
        if any(loan.job_id == job.id and loan.reclaimed_at for loan in lending.loans):
            return False  # being reclaimed (`_reclaimed`)
        samples, groups = samples_of(self._sweep), job_groups(job)
        verdict = judge(
            job, lending, self.preemption, snap.now.timestamp(), lead,
            lambda res, uuids: holder_process(samples, res, uuids, self.unix_user, groups),
        )  # fmt: skip
        changed = False
        for rid in verdict.end:
            await in_thread(self.store.preemption.end_loans, job.id, snap.now, rid)
            changed = True
        if verdict.requeue is not None:
            await in_thread(self.store.jobs.mark_requeue, job.id, verdict.requeue)
            stopping[job.id] = verdict.requeue
            self._stop_later(job.id, verdict.requeue, requeue=True)
            return True
        have = {loan.reservation_id for loan in lending.loans if loan.job_id == job.id}
        for rid, uuids in verdict.lend:
            if rid not in have:
                await in_thread(self.store.preemption.lend, job.id, rid, uuids, snap.now)
                changed = True
        if verdict.reclaim is not None:
            why, rid = verdict.reclaim
            if await self.reclaim(replace(job, lent_from=rid), why, rid):
                stopping[job.id] = why
                changed = True
        return changed

    async def _reclaimed(self, snap: Snapshot) -> bool:
        """Finish reclaims a previous leader (or a failed stop) left: stop the job again once
        its stop is overdue (another server may be stopping it: a reclaim through its API),
        or requeue it if it stopped."""
        if snap.lending is None:
            return False
        by_id = {job.id: job for job in snap.jobs}
        changed = False
        reclaimed = {n.job_id: n for n in snap.lending.loans if n.reclaimed_at is not None}
        for job_id, loan in reclaimed.items():
            job = by_id.get(job_id)
            if job_id in self._stopping:
                continue
            if job is not None and any(t.active for t in job.tasks):
                allowed = self.preemption.grace(job) + PREEMPT_PATIENCE + self.launcher.timeout
                assert loan.reclaimed_at is not None
                if (snap.now - loan.reclaimed_at).total_seconds() < allowed:
                    continue
                self._stop_later(job_id, loan.reclaim_reason or "reclaimed", requeue=True,
                                 preempt=(job.preempt_signal, 0.0))  # fmt: skip
            else:
                await self._requeue_preempted(job_id, "reclaimed by its lender")
            changed = True
        return changed

    # --- least attained service -----------------------------------------------------------

    def _in_flight(
        self, snap: Snapshot, queued: Sequence[Candidate]
    ) -> tuple[dict[str, GpuState], dict[int, Slot]]:
        """The GPU states and last slots a pass starts from, with the preemptions for new
        jobs under way: a preempted job still running lets go of its GPUs when its grace
        and the kill are over (or a moment from now, when that is overdue), and the job that
        preempted it keeps its slot on them from then on."""
        taking, plan = self._takeovers, self._plan  # replaced, never changed in place
        if not taking:
            return snap.gpus, plan
        waiting = {c.job_id: c for c in queued}
        running = {job.id: job for job in snap.jobs if any(t.active for t in job.tasks)}
        states, previous = dict(snap.gpus), dict(plan)
        now = snap.now.timestamp()
        for job_id, (victims, gpus, free_at) in taking.items():
            job = waiting.get(job_id)
            still = [running[v] for v in victims if v in running]
            if job is None or not still:
                continue
            at = max(free_at, now + 1.0)
            held = {u for victim in still for u in victim.gpus}.intersection(gpus)
            for uuid in held:
                if uuid in states:
                    states[uuid] = replace(states[uuid], release=at)
            previous[job_id] = Slot(at, at + walltime(job, now), gpus)
        return states, previous

    async def _least_served(
        self, snap: Snapshot, queued: Sequence[Candidate], result: PassResult,
        taken: Sequence[str], waiting: dict[int, str], stopping: dict[int, str],
    ) -> list[int]:  # fmt: skip
        """After the passes: the first waiting new jobs preempt running preemptible jobs that
        have had more service (`attained.takeovers`), through the reclaim path (signal,
        grace, requeue at the old place); the jobs that preempted (`waiting` says so; the
        preempted ones are in `stopping`, with why)."""
        settings = self.preemption
        alive = {c.job_id for c in queued}
        self._takeovers = {
            j: way for j, way in self._takeovers.items()
            if j in result.waiting and j in alive and not self._over(way[0], snap)
        }  # fmt: skip
        for job_id, (victims, _, at) in self._takeovers.items():
            waiting[job_id] = _taking_for(victims, at)
        if not settings.least_attained_service or not result.waiting:
            return []
        holders: dict[str, int] = {}  # GPU -> how many running jobs hold it (shares: several)
        for job in snap.jobs:
            for uuid in {u for t in job.tasks if t.active for u in t.gpus}:
                holders[uuid] = holders.get(uuid, 0) + 1
        runners = [r for job in snap.jobs if (r := self._runner(job, snap)) is not None
                   and all(holders.get(u, 0) == 1 for u in r.gpus)]  # fmt: skip
        if not runners:
            return []
        access = RuleCheck(snap, self.zone)

        def usable(job: Candidate, uuid: str, end: float) -> bool:
            if uuid in snap.unbookable:
                return False
            return not access.restricted(job.owner) or access.allows(job.owner, uuid, end)

        pending = {c.job_id: c for c in queued}
        ways = await in_thread(
            takeovers, result, pending, snap.gpus, runners, snap.now.timestamp(),
            float(settings.grace_s), settings.max_preemptions, taken=taken, usable=usable,
            skip=set(self._takeovers),
        )  # fmt: skip
        by_id = {job.id: job for job in snap.jobs}
        done = []
        for way in ways:
            if await self._take_over(way, pending[way.job_id], by_id, snap, waiting, stopping):
                done.append(way.job_id)
        return done

    def _runner(self, job: Job, snap: Snapshot) -> Runner | None:
        """A running preemptible queued job on one host, not borrowing nor being stopped
        (`_least_served` also leaves out one that shares a GPU with another job)."""
        if not (job.queued and job.preemptible and job.lent_from is None and job.tasks):
            return None
        if job.id in snap.marked or job.id in self._stopping:
            return None
        if any(t.state != TaskState.RUNNING for t in job.tasks):
            return None
        hosts = {t.host for t in job.tasks}
        if len(hosts) != 1:
            return None
        had, _ = served(job, snap.now)
        return Runner(job.id, hosts.pop(), job.gpus, had, job.restarts)

    @staticmethod
    def _over(victims: Sequence[int], snap: Snapshot) -> bool:
        """Whether none of the preempted jobs runs any more."""
        running = {job.id for job in snap.jobs if any(t.active for t in job.tasks)}
        return not running.intersection(victims)

    async def _take_over(
        self, way: Takeover, job: Candidate, by_id: dict[int, Job], snap: Snapshot,
        waiting: dict[int, str], stopping: dict[int, str],
    ) -> bool:  # fmt: skip
        """Preempt the takeover's jobs and keep the GPUs for the waiting job from when they
        are free; whether any was preempted."""
        now = snap.now
        at = now.timestamp()
        gone: list[int] = []
        for victim_id in way.victims:
            victim = by_id[victim_id]
            grace = self.preemption.grace(victim)
            had = served(victim, now)[0] / 3600
            why = (f"queued job {way.job_id}, new, takes its GPUs: this job has had {had:.1f} "
                   "GPU-hours (least attained service)")  # fmt: skip
            signal = victim.preempt_signal
            if not await in_thread(self.store.preemption.preempt, victim.id, now, why, signal,
                                   grace):  # fmt: skip
                continue
            log.info("gpuhive queue: preempting job %s for job %s", victim.id, way.job_id)
            self._stop_later(victim.id, why, requeue=True, preempt=(signal, grace))
            stopping[victim.id] = why
            self.preempted({"job": victim.id, "owner": victim.owner, "reservation": None,
                            "for_job": way.job_id, "signal": signal, "grace_s": grace,
                            "restarts": victim.restarts + 1})  # fmt: skip
            at = max(at, free_by(now, grace).timestamp())
            gone.append(victim.id)
        if not gone:
            return False
        # New dicts, not changed in place: a pass in a thread (`estimates`) may be reading them.
        slot = Slot(at, at + walltime(job, now.timestamp()), way.gpus)
        self._plan = {**self._plan, way.job_id: slot}
        self._takeovers = {**self._takeovers, way.job_id: (tuple(gone), way.gpus, at)}
        waiting[way.job_id] = _taking_for(gone, at)
        return True

    async def _requeue_preempted(self, job_id: int, why: str) -> None:
        """Back to the queue after a reclaim; told when it may no longer borrow."""
        now = self.clock()
        if not await in_thread(
            self.store.preemption.requeue, job_id, now, f"{why}; back in the queue"
        ):
            return
        job = await in_thread(self.store.jobs.get, job_id)
        limit = self.preemption.max_preemptions
        if job.preemptible and job.restarts == limit:
            detail = (f"preempted {job.restarts} times, the site's limit: it is not preempted "
                      "again and waits for GPUs nobody booked from now on")  # fmt: skip
            await in_thread(self.store.preemption.event, job_id, now, EXHAUSTED, detail)
        self.launcher._changed(job_id)

    async def _resumed(self, job: Job, snap: Snapshot) -> None:
        if not job.preemptible or not job.restarts:
            return
        fresh = await in_thread(self.store.jobs.get, job.id)
        where = (
            f"on reservation {fresh.lent_from}'s GPUs" if fresh.lent_from else "in unbooked time"
        )
        detail = f"started again after {job.restarts} preemption(s), {where}"
        await in_thread(
            self.store.preemption.event, job.id, snap.now, RESUMED, detail, fresh.lent_from
        )


def _taking_for(victims: Sequence[int], at: float) -> str:
    """Why a job that preempted others waits."""
    names = ", ".join(str(v) for v in victims)
    return (f"job {names} is being preempted for it (least attained service); it starts when "
            f"the GPUs are free, by {when(at)}")  # fmt: skip


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Blocking work off the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)
