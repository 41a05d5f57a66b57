"""Jobs: the facade the API calls; create, start, stop, queue and read jobs, and run the queue."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

from ..bookings.budgets import BudgetService
from ..errors import Conflict, Forbidden, Invalid, Unavailable
from ..hosts.pool import HostPool, HostUnavailable, SshSettings
from ..model import Identity, isoformat, utcnow
from ..model.errand import Errand
from ..model.jobs import ACTIVE, LIVE, RECENT_JOBS, Job, TaskState
from ..model.requests import JobRequest
from ..privacy import Privacy, job_json
from ..store import Store
from . import containers, slurm
from .budgets import JobBudgets
from .catalog import TEMPLATES
from .launcher import Launcher
from .logins import Logins
from .order import standing
from .preemption import PreemptionSettings
from .queue import Scheduler
from .rules import JobRules
from .selection import SiteVendors

if TYPE_CHECKING:
    from ..monitor.sampler import Sweep

# (reservation, by whom, why): the booking lends no more (Bookings.stop_lending)
StopLending = Callable[[int, str, str], Awaitable[Any]]


class Jobs:
    """Every job operation a request or the monitor asks for, on one object."""

    def __init__(
        self,
        store: Store,
        pool: HostPool,
        run: Callable[..., Awaitable[Any]],
        zone: tzinfo,
        identity_of: Callable[[str], Identity],
        *,
        interval: float,
        ssh: SshSettings,
        privacy: Privacy,
        stop_lending: StopLending,
        changed: Callable[[int], Any] = lambda _job_id: None,
        preemption: PreemptionSettings | None = None,
        preempted: Callable[[dict[str, Any]], Any] = lambda _event: None,
    ) -> None:
        self.store = store
        self.run = run
        self.privacy = privacy
        self._stop_lending = stop_lending
        self.rules = JobRules(store, zone, identity_of, hosts=lambda: pool.hosts)
        self.budgets = JobBudgets(BudgetService(store, zone, identity_of))
        self.vendors = SiteVendors(lambda: pool.hosts)  # the finder's 'vendor' asks them
        self.preemption = preemption or PreemptionSettings()
        unix_user = self.preemption.unix_user  # the site's unix_users: what each user runs as
        self.logins = Logins(pool, ssh, unix_user)
        self.launcher = Launcher(pool, store.jobs, changed=changed, unix_user=unix_user)
        self.launcher.hold_of = functools.partial(slurm.hold_of, store, run)
        self.rules.preempt_grace_s = self.preemption.grace_s
        self.scheduler = Scheduler(
            store, self.launcher, identity_of=identity_of, zone=zone, interval=interval,
            preemption=self.preemption, unix_user=unix_user, preempted=preempted,
        )  # fmt: skip
        self._starts: tuple[object, dict[int, datetime | None]] | None = None

    # --- after each sweep (leader only) ------------------------------------------------

    async def on_sweep(self, sweep: Sweep) -> None:
        """Follow running tasks, then run the queue."""
        await self.launcher.sync()
        await self.scheduler.tick(sweep)

    async def settle(self) -> None:
        """Wait for the queue's work in flight (this server stops leading)."""
        await self.scheduler.settle()

    async def lent(self, sweep: Sweep) -> dict[tuple[str, int], int]:
        """GPU processes of jobs on loan: (host, pid) → the reservation that lends."""
        return await self.scheduler.lent_processes(sweep)

    async def reclaim(self, who: Identity, reservation_id: int) -> dict[str, Any]:
        """The holder (or an admin) takes a reservation's lent GPUs back now: every job on
        loan gets its signal; when the GPUs are free at the latest."""
        res = await self.run(self.store.reservations.get, reservation_id)
        if res.owner != who.name and not who.is_admin:
            raise Forbidden(f"Only {res.owner} (or an admin) may take back the GPUs of "
                            f"reservation {reservation_id}.")  # fmt: skip
        now = utcnow()
        if res.cancelled or res.end <= now:
            raise Conflict(f"Reservation {reservation_id} is over: it has no GPUs to take back.")
        why = f"{who.name} took the GPUs of reservation {reservation_id} back"
        # first: else the next admission pass would lend the GPUs again before the holder
        # started anything (the holder may turn lending on again)
        await self._stop_lending(reservation_id, who.name, why)
        jobs, free_by = await self.scheduler.reclaim_reservation(reservation_id, why)
        return {"reclaimed": jobs, "free_by": isoformat(free_by)}

    async def make_way(self, owner: str, gpus: tuple[str, ...], why: str) -> None:
        """Before `owner` starts something on `gpus` (a kernel): take back the GPUs their
        reservations lent to preemptible jobs, and wait for those jobs to go."""
        await self.scheduler.make_way(owner, gpus, why)

    async def owners(self, sweep: Sweep) -> dict[tuple[str, int], str]:
        """GPU processes that belong to running gpuhive jobs: (host, pid) → job owner."""
        tasks = await self.run(self.store.jobs.tasks, ACTIVE)
        groups: dict[tuple[str, int | None], str] = {
            (t.host, t.pgid): t.owner for t in tasks if t.pgid
        }
        owners = {}
        for host, sample in sweep.samples.items():
            for proc in sample.processes:
                owner = groups.get((host, proc.pgid))
                if owner is not None:
                    owners[(host, proc.pid)] = owner
        return owners

    # --- queries -----------------------------------------------------------------------

    @staticmethod
    def templates() -> list[dict[str, Any]]:
        """The job templates with their options."""
        return [template.describe() for template in TEMPLATES.values()]

    async def find(
        self, user: str | None, status: str | None, limit: int = RECENT_JOBS
    ) -> tuple[list[Job], bool]:
        """The newest `limit` jobs and every job running now (see `Jobs.recent`), of one
        owner and/or in one status when given; and whether older ones were left out.

        A list of every job ever grew with the site's history, and every open sidebar polls
        one (its user's) every few seconds."""
        found: tuple[list[Job], bool] = await self.run(
            self.store.jobs.recent, owner=user, limit=limit, status=status
        )
        return found

    async def get(self, job_id: int) -> Job:
        """One job (404 when there is none)."""
        job: Job = await self.run(self.store.jobs.get, job_id)
        return job

    async def queue(self, who: Identity) -> list[dict[str, Any]]:
        """Queued jobs not yet running, with when they could start and what they wait for."""
        jobs = await self.run(self.store.jobs.all, queued=True)
        pending = [j for j in jobs if j.status == TaskState.PENDING]
        estimates = await self.starts({j.id for j in pending})
        standing = self.standing()
        return [
            {
                **job_json(job, who, self.privacy),
                "place": None,
                "waiting_for": None,
                **standing.get(job.id, {}),
                "estimated_start": isoformat(estimates.get(job.id)),
            }
            for job in pending
        ]

    async def starts(self, job_ids: set[int]) -> dict[int, datetime | None]:
        """Each pending queued job's projected start (`Scheduler.estimates`), worked out once
        per pass of the queue, or again when one of `job_ids` is new to it: GET queue and
        GET jobs give the same number."""
        report, cached = self._starts or (None, None)
        if cached is None or report is not self.scheduler.last_report or job_ids - cached.keys():
            # a job asked for that the estimates leave out stays unknown until the next pass
            # (not worked out again on every poll)
            cached = {**dict.fromkeys(job_ids), **await self.scheduler.estimates()}
            self._starts = (self.scheduler.last_report, cached)
        return cached

    def engine_start(self, job: Job) -> datetime | None:
        """When Slurm expects to start the job's tasks that wait in its queue (None: none
        waits there, or Slurm does not say yet), as the launcher's last sync saw."""
        return self.launcher.engine_starts.of(job)

    def standing(self) -> dict[int, dict[str, Any]]:
        """Each queued job the last pass saw wait: its place in the pass's order (1: next)
        and why it waits."""
        report = self.scheduler.last_report
        return standing(report.waiting if report is not None else {})

    async def preview(self, who: Identity, request: JobRequest) -> list[dict[str, Any]]:
        """The tasks a request would run, with their exact commands (nothing is stored)."""
        job, specs = await self.run(self.rules.build, who, request)
        shown = self.rules.preview(specs)
        if job.container is not None:  # the engine line each task will run
            shown = containers.previewed(
                shown, specs, job, self.rules.hosts(), self.preemption.unix_user(job.owner)
            )
        return shown

    async def log(
        self, who: Identity, job_id: int, task_index: int, offset: int, tail: int | None
    ) -> dict[str, Any]:
        """A piece of one task's log, from `offset` or its last `tail` bytes."""
        job = await self._owned(who, job_id, "read the log of")
        tasks = {t.index: t for t in job.tasks}
        if task_index not in tasks:
            raise Invalid(f"Job {job_id} has no task {task_index} (it has {len(tasks)}).")
        task = tasks[task_index]
        try:
            chunk = await self.launcher.log(task, offset=offset, tail=tail)
        except HostUnavailable as error:
            raise Unavailable(f"Cannot read the log on {error.host}: {error.reason}") from None
        return {
            "task": task_index,
            "text": chunk.text,
            "start": chunk.start,
            "next_offset": chunk.next_offset,
            "size": chunk.size,
            "state": task.state.value if hasattr(task.state, "value") else str(task.state),
            "attach": self.launcher.attach_hint(task),
        }

    def public_key(self) -> str | None:
        """The public key users add to authorized_keys (None without SSH hosts)."""
        return self.logins.public_key()

    async def ssh_status(self, who: Identity) -> dict[str, Any]:
        """The public key, and per SSH host whether jobs can run as `who` there."""
        return await self.logins.status(who)

    # --- changes -----------------------------------------------------------------------

    async def create(self, who: Identity, request: JobRequest, errand: Errand | None = None) -> Job:
        """Store a job; with `start: true` (and not queued or scheduled) run it at once
        (`errand`: the API request it is part of, handed to the job's transaction)."""
        job, specs = await self.run(self.rules.build, who, request)
        await self.logins.require(job.owner, {spec.host for spec in specs})
        on_booking = request.reservation is not None
        await self.run(self.budgets.check_new, who, job, specs, on_booking)
        start = request.start and not job.queued and job.start_at is None
        if start:  # checked before storing, so a refused start leaves nothing behind
            uuids = [g.uuid for spec in specs for g in spec.gpus]
            await self.run(self.rules.check_run_now, job.owner, uuids, job.walltime)
            await self.run(self.budgets.check_now, who, job, uuids)
        created: Job = await self.run(self.store.jobs.create, job, specs, errand)
        if start:
            return await self._start(created)
        return created

    async def start(self, who: Identity, job_id: int) -> Job:
        """Start (or restart) a job now, on its own GPUs."""
        job = await self._owned(who, job_id, "start")
        if job.status in ACTIVE:
            raise Conflict(f"Job {job_id} is already {job.status}.")
        await self.run(self.rules.check_run_now, job.owner, job.gpus, job.walltime)
        await self.run(self.budgets.check_now, who, job, job.gpus)
        await self.logins.require(job.owner, {task.host for task in job.tasks})
        if job.status != TaskState.PENDING:
            job = await self.run(self.store.jobs.reset, job_id)
        return await self._start(job)

    async def stop(self, who: Identity, job_id: int) -> Job:
        """Stop a job gracefully (a pending one just ends)."""
        job = await self._owned(who, job_id, "stop")
        if job.status not in LIVE:
            raise Conflict(f"Job {job_id} is {job.status}; there is nothing to stop.")
        if not job.tasks and await self.run(self.store.jobs.withdraw, job_id):
            return await self.get(job_id)  # never placed: it leaves the queue, stopped
        return (await self.launcher.stop(job)).job

    async def delete(self, who: Identity, job_id: int) -> None:
        """Forget a job and its tasks."""
        await self._owned(who, job_id, "delete")
        await self.run(self.store.jobs.delete, job_id)

    async def set_queued(self, who: Identity, job_id: int, queued: bool) -> Job:
        """Put a job in the queue (it starts when its GPUs are free) or take it out."""
        job = await self._owned(who, job_id, "queue" if queued else "dequeue")
        if queued and job.status in ACTIVE:
            raise Conflict(f"Job {job_id} is {job.status}; stop it before queueing it.")
        if queued and not job.queued:  # outside its owner's bookings it spends a budget
            await self.run(self.budgets.check_requeue, who, job)
        changed: Job = await self.run(
            functools.partial(self.store.jobs.update, job_id, by=who.name, queued=queued)
        )
        return changed

    async def _owned(self, who: Identity, job_id: int, verb: str) -> Job:
        job = await self.get(job_id)
        self.rules.may_act(who, job, verb)
        return job

    async def _start(self, job: Job) -> Job:
        report = await self.launcher.start(job)
        if not report.ok:
            raise Conflict(report.message, job=report.job.to_json(detail=True))
        return report.job
