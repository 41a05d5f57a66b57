"""Budgets as jobs spend them: a queued or preemptible job, or one started (now, or scheduled
at `start_at`) on GPUs its owner holds no booking of then, is refused (409) when its GPUs ×
walltime would overrun a budget of its owner or their groups (bookings/budgets.py says what
is left). A job on a booking is paid by the booking: it counts nothing more.

What a job counts: its named GPUs, or its `gpu_count`; a share job (a queued job of one GPU
that asks `memory`) its share of the largest shareable GPU, the least it can take. Without a
walltime its length is unknown: such a job is refused only when a budget is spent already.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from ..bookings.budgets import BudgetService
from ..model import Identity, units_conflict
from ..model.jobs import Job
from .admission import gpu_count
from .queue_inputs import share_memory
from .tasks import TaskSpec


class JobBudgets:
    """The budget guard of jobs outside bookings."""

    def __init__(self, service: BudgetService) -> None:
        self.service = service
        self.store = service.store
        self.identity_of = service.identity_of

    def unheld(
        self,
        owner: str,
        uuids: Collection[str],
        walltime: timedelta | None,
        at: datetime | None = None,
    ) -> int:
        """How many of these GPUs `owner` holds no booking of at `at` (default now; a
        booking of a GPU's slice holds the GPU, one of the GPU its slices)."""
        now = max(at or self.service.now(), self.service.now())
        wanted = set(uuids)
        every = self.store.inventory.units()
        gpus = [g for g in every if g.uuid in wanted]
        ids = [u.id for u in every if any(units_conflict(u, g) for g in gpus)]
        until = now + (walltime or timedelta(hours=1))
        mine = self.store.reservations.window(now, until, gpu_ids=ids, owner=owner)
        held = {g.id for r in mine if r.start <= now for g in r.gpus}
        return sum(1 for g in gpus if not {g.id, g.device_id} & held)

    def gpus(self, job: Job, named: int) -> float:
        """The GPUs `job` counts: its count (a share job its share), else `named`."""
        count = gpu_count(job.options)
        if count is None:
            return float(named)
        memory = share_memory(job, count)
        if memory is None:
            return float(count)
        sizes = [g.memory_mib for g in self.store.inventory.gpus() if g.shareable and g.memory_mib]
        return min(1.0, memory / max(sizes)) if sizes else 1.0

    def check(self, who: Identity, job: Job, gpus: float) -> None:
        """Refuse (409) `job` on `gpus` GPUs outside bookings when it would overrun a budget
        (`who`: the requester; their groups are the owner's when it is theirs)."""
        owner = who if who.name == job.owner else self.identity_of(job.owner)
        what = f"Job {job.id}" if job.id else f"Job '{job.name}'"
        self.service.check_job(owner, gpus, job.walltime, job.start_at, what)

    def check_now(self, who: Identity, job: Job, uuids: Collection[str]) -> None:
        """A job started now on `uuids`: those its owner holds no booking of count."""
        self.check(who, job, self.unheld(job.owner, uuids, job.walltime))

    def check_requeue(self, who: Identity, job: Job) -> None:
        """A job put back into the queue: its GPUs, less those its owner holds now."""
        self.check(who, job, self.gpus(job, self.unheld(job.owner, job.gpus, job.walltime)))

    def check_new(
        self, who: Identity, job: Job, specs: Sequence[TaskSpec], on_booking: bool
    ) -> None:
        """A new queued (or preemptible) job, or one scheduled (`start_at`): refused (409)
        when it would overrun a budget (`on_booking`: it runs on its owner's booking, which
        paid for it)."""
        if on_booking:
            return
        uuids = {g.uuid for spec in specs for g in spec.gpus}
        if job.queued:
            self.check(who, job, self.gpus(job, len(uuids)))
        elif job.start_at is not None:  # scheduled: its GPUs not booked by its owner then
            self.check(who, job, self.unheld(job.owner, uuids, job.walltime, job.start_at))
