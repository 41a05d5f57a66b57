"""The queue and the schedule: the leader's `Scheduler.tick` after each sweep.

What one tick does, in order:
1. Jobs with a stop time that has come are stopped (not queued again); pending ones are
   marked stopped ("stopped before it started"). So are running queued jobs that ran past
   their walltime (`default_walltime` when they declared none): the launcher's graceful
   stop (SIGINT, `grace`, SIGTERM, then SIGKILL), not retried. Backfill counts on it.
2. A running queued job whose GPUs have a reservation beginning within the preemption lead
   (1.5 poll intervals + the stop grace + the kill patience), or one active now, is marked
   in the store (`requeue_reason`), stopped gracefully and put back to pending. The mark
   makes this survive a restart: a marked job that is no longer active is requeued.
3. A failed (or lost) queued job with `attempts < max_retries` goes back to pending, and
   `attempts` grows by one, in one transaction, so a failure is retried exactly once.
4. Scheduled jobs that are not queued start when their `start_at` has come.
5. The admission pass (`admission.admit`) over the pending queued jobs: see there. Running
   work claims its GPUs through its active tasks (in the store, so claims survive a
   restart) until its walltime; a scheduled job's planned run [start_at, stop_at) counts as
   a reservation. The slots the pass keeps for waiting jobs are handed to the next pass (in
   memory: after a restart they are searched afresh), and `estimates` runs the same pass.

Processes in the sweep are matched to the job whose active task has the same (host, process
group) — or, when the probe gave no process group, the same owner on one of the task's
GPUs. Queued jobs are never stopped for processes, only for reservations, stop times and
walltimes.
Reservations block the queue whoever holds them, the job's owner included: queued jobs run
in time nobody reserved. A queued job without a walltime is treated as `default_walltime`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from ..bookings.budgets import BudgetService
from ..errors import Conflict, NotFound
from ..model import Identity, utcnow
from ..model.jobs import Job, TaskState
from ..monitor.sampler import Sweep
from ..store import Store
from . import slurm
from .admission import (
    CHOICE,
    ENGINE,
    RESERVATION_DEPTH,
    Candidate,
    Slot,
    admit,
    gpu_count,
)
from .launcher import KILL_PATIENCE, Launcher
from .model import mps_hosts, pinnings_of
from .preemption import (
    PREEMPT_PATIENCE,
    Lending,
    PreemptionSettings,
    Watch,
    probe_host,
)
from .queue_inputs import (
    RuleCheck,
    Snapshot,
    _cause,
    _reserved_soon,
    _span,
    bind,
    booked,
    bookings_of,
    candidates,
    gpu_states,
    reserved_spans,
)
from .reclaims import Reclaims, in_thread
from .selection import vendors_of
from .tasks import TemplateError

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one tick did; `waiting` says why each pending queued job did not start."""

    at: datetime
    started: list[int] = field(default_factory=list)  # scheduled jobs started on time
    admitted: list[int] = field(default_factory=list)  # queued jobs started
    stopping: dict[int, str] = field(default_factory=dict)  # jobs being stopped, and why
    requeued: list[int] = field(default_factory=list)
    retried: list[int] = field(default_factory=list)
    failures: dict[int, str] = field(default_factory=dict)  # jobs that did not start
    waiting: dict[int, str] = field(default_factory=dict)
    skipped: bool = False  # another tick was still running


class Scheduler(Reclaims):
    """Runs scheduled jobs on time and queued jobs in free, unreserved GPU time (and, as a
    `Reclaims`, preemptible jobs on lent GPUs too)."""

    def __init__(
        self,
        store: Store,
        launcher: Launcher,
        *,
        identity_of: Callable[[str], Identity],
        zone: tzinfo,
        interval: float = 5.0,
        default_walltime: timedelta = timedelta(hours=1),
        depth: int = RESERVATION_DEPTH,
        estimate_depth: int = 256,
        horizon: timedelta = timedelta(days=14),
        sync_tasks: bool = False,
        clock: Callable[[], datetime] = utcnow,
        preemption: PreemptionSettings | None = None,
        unix_user: Callable[[str], str] = lambda name: name,
        preempted: Callable[[dict[str, Any]], Any] = lambda _event: None,
    ) -> None:
        self.store = store
        self.launcher = launcher
        self.identity_of = identity_of
        self.zone = zone
        self.interval = interval
        self.default_walltime = default_walltime
        self.depth = depth
        self.estimate_depth = estimate_depth
        self.horizon = horizon
        self.sync_tasks = sync_tasks
        self.clock = clock
        self.budgets = BudgetService(store, zone, identity_of, clock=clock)  # whose is spent
        self.last_report: TickReport | None = None
        self._sweep: Sweep | None = None
        self._lock = asyncio.Lock()
        self._stopping: dict[int, asyncio.Task[None]] = {}
        self._plan: dict[int, Slot] = {}  # the slots the last pass kept, by job
        self._takeovers = {}  # preemptions for new jobs under way (`Reclaims._least_served`)
        # Preemptible jobs (see `preemption`): the launcher reclaims lent GPUs before a
        # holder's job starts; the watch probes lent GPUs between sweeps.
        self.preemption = preemption or PreemptionSettings()
        self.unix_user = unix_user
        self.preempted = preempted  # told each `job.preempted` event
        launcher.preemption = self.preemption
        launcher.before_start = self._before_start
        # a task Slurm's queue placed gets the node and GPUs Slurm gave it (`jobs.slurm`)
        launcher.place = slurm.placing(store, launcher.pool)
        self.watch = Watch(lambda host: probe_host(launcher.pool, host), self._lent,
                           self.reclaim, self.preemption.watch_interval)  # fmt: skip
        self.watch.unix_user = unix_user

    def lead_time(self, interval: float | None = None) -> float:
        """Seconds before a reservation at which a queued job on its GPUs is stopped."""
        every = self.interval if interval is None else interval
        return 1.5 * every + self.launcher.grace + KILL_PATIENCE

    # --- the tick --------------------------------------------------------------------

    async def tick(self, sweep: Sweep | None = None) -> TickReport:
        """One round (leader only): stops, requeues, retries, scheduled starts, admission."""
        if self._lock.locked():
            return TickReport(self.clock(), skipped=True)
        async with self._lock:
            if self.sync_tasks:
                await self.launcher.sync()
            self._sweep = sweep
            interval = sweep.interval if sweep is not None else self.interval
            now = self.clock()
            report = TickReport(now)
            snap = await in_thread(self.snapshot, now, sweep)
            if await self._housekeeping(snap, report, self.lead_time(interval)):
                snap = await in_thread(self.snapshot, now, sweep)
            await self._admit(snap, report, self.lead_time(interval))
            if snap.lending is not None and (snap.lending.loans or report.admitted):
                self.watch.ensure()
            self.last_report = report
            return report

    async def settle(self) -> None:
        """Stop the watch, wait for the stops that ticks started in the background."""
        await self.watch.stop()
        while self._stopping:
            await asyncio.gather(*self._stopping.values(), return_exceptions=True)

    async def _housekeeping(self, snap: Snapshot, report: TickReport, lead: float) -> bool:
        """Steps 1-4 of the module doc; whether the store changed."""
        now, jobs = snap.now, self.store.jobs
        changed = await self._reclaimed(snap)
        starts: list[int] = []
        for job in snap.jobs:
            status = job.status
            active = any(t.active for t in job.tasks)
            reason = snap.marked.get(job.id)
            if reason is not None:
                if active:
                    self._stop_later(job.id, reason, requeue=True)
                elif status == TaskState.STOPPED:
                    if await in_thread(jobs.requeue, job.id, expect={"stopped"}, note=reason):
                        report.requeued.append(job.id)
                else:
                    await in_thread(jobs.mark_requeue, job.id, None)
                changed = True
            elif job.stop_at is not None and job.stop_at <= now:
                if active or (status == TaskState.PENDING and job.tasks):
                    why = f"its stop time {job.stop_at:%Y-%m-%d %H:%M} UTC has come"
                    report.stopping[job.id] = why
                    self._stop_later(job.id, why, requeue=False)
            elif job.queued and active and ENGINE in job.options:
                continue  # in its engine's queue: Slurm keeps its time limit and bookings
            elif job.queued and active and (over := self._overran(job, now)) is not None:
                report.stopping[job.id] = over
                self._stop_later(job.id, over, requeue=False, reason=over)
            elif job.queued and active and job.preemptible and snap.lending is not None:
                changed |= await self._borrowing(job, snap, report.stopping, lead)
            elif job.queued and active:
                soon = _reserved_soon(job, snap, now.timestamp() + lead)
                if soon is not None:
                    await in_thread(jobs.mark_requeue, job.id, soon)
                    report.stopping[job.id] = soon
                    self._stop_later(job.id, soon, requeue=True)
                    changed = True
            elif (
                job.queued
                and status in (TaskState.FAILED, TaskState.LOST)
                and job.attempts < job.max_retries
            ):
                note = f"retry {job.attempts + 1} of {job.max_retries} after: {_cause(job)}"
                if await in_thread(jobs.requeue, job.id, expect={"failed", "lost"}, note=note,
                             count_attempt=True):  # fmt: skip
                    report.retried.append(job.id)
                    changed = True
            elif (
                not job.queued
                and job.start_at is not None
                and job.start_at <= now
                and status == TaskState.PENDING
                and job.tasks
            ):
                starts.append(job.id)
        for job_id, outcome in zip(starts, await self._start_all(starts), strict=True):
            if outcome is None:
                report.started.append(job_id)
            else:
                report.failures[job_id] = outcome
            changed = True
        return changed

    def _overran(self, job: Job, now: datetime) -> str | None:
        """Why a running queued job must stop: it ran past its walltime (None: it did not)."""
        started = [t.started_at for t in job.tasks if t.started_at is not None]
        walltime = job.walltime or self.default_walltime
        if not started or min(started) + walltime > now:
            return None
        return f"it ran past its walltime of {_span(walltime)}"

    def _pass(self, snap: Snapshot, lead: float, depth: int) -> tuple[list[Candidate], Any]:
        """The admission pass over every pending queued job, with the last pass's slots."""
        queued, held = self.budgets.hold(candidates(  # a spent budget's jobs wait
            snap.jobs, snap.now, self.default_walltime, min_length=lead, inventory=snap.inventory,
            vendors=snap.vendors, attained=self.preemption.least_attained_service))  # fmt: skip
        until = (snap.now + self.horizon).timestamp()
        states, previous = self._in_flight(snap, queued)
        result = admit(queued, states, snap.now.timestamp(), access=RuleCheck(snap, self.zone),
                       reserved=snap.reserved, previous=previous, depth=depth,
                       horizon=until)  # fmt: skip
        result.waiting.update(held)
        return queued, result

    async def _admit(self, snap: Snapshot, report: TickReport, lead: float) -> None:
        handed, failed = await slurm.hand_over(self.store, self.launcher.pool, snap.jobs,
                                               self._start_all)  # fmt: skip
        report.admitted += handed
        report.failures.update(failed)
        queued, result = await in_thread(self._pass, snap, lead, self.depth)
        self._plan = dict(result.planned)
        report.waiting = result.waiting
        if not queued:
            return
        borrowed = await in_thread(self._lending_pass, snap, queued, result)
        for admission in borrowed:
            report.waiting.pop(admission.job_id, None)
        taken = [u for a in (*result.admitted, *borrowed) for u in a.gpus]
        await self._least_served(snap, queued, result, taken, report.waiting, report.stopping)
        by_id = {job.id: job for job in snap.jobs}
        todo: list[int] = []
        lent = {a.job_id for a in borrowed}
        for admission in [*result.admitted, *borrowed]:
            job = by_id[admission.job_id]
            try:
                if gpu_count(job.options) is not None:
                    chosen = [snap.inventory[u] for u in admission.gpus]
                    pins = pinnings_of(self.launcher.pool.hosts)
                    mps = mps_hosts(self.launcher.pool.hosts)
                    specs = await in_thread(bind, job, chosen, self.store, pins, mps)
                    await in_thread(self.store.jobs.replace_tasks, job.id, specs)
                if admission.job_id in lent:
                    await in_thread(self._open_loans, job.id, admission.gpus, snap, lead)
            except (TemplateError, ValueError, Conflict, NotFound) as error:
                report.failures[job.id] = f"could not place the job: {error}"
                continue
            todo.append(job.id)
        for job_id, outcome in zip(todo, await self._start_all(todo), strict=True):
            if outcome is None:
                report.admitted.append(job_id)
                log.info("gpuhive queue: started job %s", job_id)
                await self._resumed(by_id[job_id], snap)
            else:
                report.failures[job_id] = outcome
                if job_id in lent:
                    await in_thread(self.store.preemption.end_loans, job_id, snap.now)

    async def _start_all(self, job_ids: Sequence[int]) -> list[str | None]:
        """Start jobs, a few at a time; None for each that started, else why not."""
        gate = asyncio.Semaphore(8)

        async def one(job_id: int) -> str | None:
            async with gate:
                try:
                    started = await self.launcher.start(job_id, only_pending=True)
                except (Conflict, NotFound) as error:
                    return str(error)
                return None if started.ok else started.message

        return list(await asyncio.gather(*(one(i) for i in job_ids)))

    def _stop_later(
        self,
        job_id: int,
        why: str,
        *,
        requeue: bool,
        reason: str | None = None,
        preempt: tuple[str, float] | None = None,
    ) -> None:
        """Stop a job in the background (a graceful stop takes seconds); once at a time.
        `reason` is recorded on its tasks; `preempt` (signal, grace): a reclaim."""
        if job_id in self._stopping:
            return
        task = asyncio.create_task(self._stop(job_id, why, requeue, reason, preempt))
        self._stopping[job_id] = task
        task.add_done_callback(lambda _: self._stopping.pop(job_id, None))

    async def _stop(
        self,
        job_id: int,
        why: str,
        requeue: bool,
        reason: str | None,
        preempt: tuple[str, float] | None = None,
    ) -> None:
        try:
            if preempt is not None:
                signal, grace = preempt
                stopped = await self.launcher.stop(
                    job_id, grace=grace, signal=signal, patience=PREEMPT_PATIENCE, reason=why
                )
            else:
                stopped = await self.launcher.stop(job_id, reason=reason)
            if stopped.failures:
                log.warning("gpuhive queue: job %s did not stop: %s", job_id, stopped.failures)
                return  # still marked: the next tick tries again
            log.info("gpuhive queue: stopped job %s: %s", job_id, why)
            if preempt is not None:
                await self._requeue_preempted(job_id, why)
            elif requeue:
                jobs = self.store.jobs
                if not await in_thread(jobs.requeue, job_id, expect={"stopped"}, note=why):
                    await in_thread(jobs.mark_requeue, job_id, None)
        except NotFound:
            pass
        except Exception:
            log.exception("gpuhive queue: stopping job %s failed", job_id)

    # --- preemptible jobs -----------------------------------------------------------

    # --- what the UI asks ------------------------------------------------------------

    async def estimates(self) -> dict[int, datetime | None]:
        """For each pending queued job, its projected start (None: not known).

        The tick's own pass, run now with the slots the last tick kept: for the first
        `depth` waiting jobs a commitment (see `admission`), for the next ones up to
        `estimate_depth` a projection that backfill may still push back.
        """
        now = self.clock()
        sweep = self._sweep
        if sweep is not None and (now - sweep.at).total_seconds() > 3 * sweep.interval:
            sweep = None
        snap = await in_thread(self.snapshot, now, sweep)
        interval = sweep.interval if sweep is not None else self.interval
        depth = max(self.depth, self.estimate_depth)
        _, result = await in_thread(self._pass, snap, self.lead_time(interval), depth)
        return {
            job_id: None if ts is None else datetime.fromtimestamp(ts, UTC)
            for job_id, ts in result.starts(now.timestamp()).items()
        }

    # --- reading the world -----------------------------------------------------------

    def snapshot(self, now: datetime, sweep: Sweep | None) -> Snapshot:
        """Jobs, GPU states and reservations as plain data (blocking: runs in a thread)."""
        jobs, marked = self.store.jobs.schedulable()
        inventory = {gpu.uuid: gpu for gpu in self.store.inventory.gpus()}
        reserved = reserved_spans(booked(self.store, now, now + self.horizon), jobs)
        ended: list[tuple[str, int]] = []
        left: list[tuple[str, str]] = []
        if sweep is not None:  # tasks seen to end after the sweep was taken
            ended = [k for k, at in self.launcher.ended_groups.items() if at >= sweep.at]
            left = [k for k, at in self.launcher.ended_gpus.items() if at >= sweep.at]
        states = gpu_states(inventory.values(), reserved, jobs, sweep, now,
                            default_walltime=self.default_walltime, ended=ended,
                            left=left)  # fmt: skip
        unbookable = set()
        for gpu_id, condition in self.store.health.unbookable().items():
            gpu = self.store.inventory.gpu_by_id(gpu_id)  # failed or drained: given to no job
            unbookable.add(gpu.uuid)
            if gpu.uuid in states and states[gpu.uuid].blocker is None:
                why = condition.why_not(gpu.ref).split(". ")[0]
                states[gpu.uuid] = replace(states[gpu.uuid], blocker=why)
        slurm.close_engine_nodes(self.launcher.pool, inventory.values(), states, unbookable)
        rules = self.store.rules.all()
        owners = {job.owner for job in jobs if job.queued} if rules else set()
        identities = {name: self.identity_of(name) for name in owners}
        lending = None
        if any(job.preemptible for job in jobs):
            loans = self.store.preemption.open_loans()
            bookings = self.store.reservations.window(now, now + self.horizon)
            choice = self.store.preemption.lending(r.id for r in bookings)
            lending = Lending(bookings, choice, loans)
        asks = any(job.queued and any(k in job.options for k in CHOICE) for job in jobs)
        vendors = vendors_of(self.launcher.pool.hosts) if asks else {}  # for a vendor or model
        return Snapshot(now, jobs, marked, states, reserved, inventory, rules, identities,
                        lending, vendors, frozenset(unbookable))  # fmt: skip


__all__ = [
    "RuleCheck",
    "Scheduler",
    "Snapshot",
    "TickReport",
    "bind",
    "booked",
    "bookings_of",
    "candidates",
    "gpu_states",
    "reserved_spans",
]
