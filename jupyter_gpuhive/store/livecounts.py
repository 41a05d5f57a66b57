"""Cheap aggregate reads for a Prometheus scrape: live reservations, holdings, waiting jobs."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import and_, case, func, or_, select

from ..model.jobs import ACTIVE, TaskState
from .database import Database
from .schema import gpus, job_tasks, jobs, reservation_gpus, reservations, violations


def reservation_counts(db: Database, now: datetime) -> dict[tuple[str, str], int]:
    """{(owner, 'active' | 'upcoming'): count} of reservations not ended nor cancelled."""
    state = case((reservations.c.start_at <= now, "active"), else_="upcoming")
    query = (
        select(reservations.c.owner, state.label("state"), func.count())
        .where(reservations.c.cancelled_at.is_(None), reservations.c.end_at > now)
        .group_by(reservations.c.owner, state)
    )
    with db.read() as conn:
        return {(row[0], row[1]): int(row[2]) for row in conn.execute(query)}


def holdings(db: Database, now: datetime) -> list[tuple[str, int, str]]:
    """(unit UUID, reservation id, owner) of every unit an active reservation holds."""
    query = (
        select(gpus.c.uuid, reservations.c.id, reservations.c.owner)
        .select_from(
            reservation_gpus.join(
                reservations, reservations.c.id == reservation_gpus.c.reservation_id
            ).join(gpus, gpus.c.id == reservation_gpus.c.gpu_id)
        )
        .where(
            reservation_gpus.c.start_at <= now,
            reservation_gpus.c.end_at > now,
            reservation_gpus.c.cancelled.is_(False),
        )
    )
    with db.read() as conn:
        return [(row[0], int(row[1]), row[2]) for row in conn.execute(query)]


def waiting_jobs(db: Database) -> tuple[dict[str, int], datetime | None]:
    """Queued jobs waiting for GPUs per owner, and the oldest's time: those GET queue lists
    (status pending, `model.jobs.job_status`): no task yet (a job by count), or pending tasks
    with none running and none failed, lost or stopped (GPUs named; preempted back in the queue)."""
    task = job_tasks.c
    of_job = task.job_id == jobs.c.id
    settled = {str(s) for s in (*ACTIVE, TaskState.FAILED, TaskState.LOST, TaskState.STOPPED)}
    has_tasks = select(task.id).where(of_job).exists()
    has_pending = select(task.id).where(of_job, task.state == str(TaskState.PENDING)).exists()
    not_waiting = select(task.id).where(of_job, task.state.in_(sorted(settled))).exists()
    query = (
        select(jobs.c.owner, func.count(), func.min(jobs.c.created_at))
        .where(and_(jobs.c.queued.is_(True), ~not_waiting, or_(~has_tasks, has_pending)))
        .group_by(jobs.c.owner)
    )
    with db.read() as conn:
        rows = conn.execute(query).all()
    oldest = [row[2] for row in rows if row[2] is not None]
    return {row[0]: int(row[1]) for row in rows}, min(oldest) if oldest else None


class LiveCountReads:
    """The scrape's aggregate reads as a repository (`Store.live_counts`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def reservation_counts(self, now: datetime) -> dict[tuple[str, str], int]:
        """{(owner, 'active' | 'upcoming'): count} of reservations not ended nor cancelled."""
        return reservation_counts(self.db, now)

    def holdings(self, now: datetime) -> list[tuple[str, int, str]]:
        """What each active reservation holds (see `holdings`)."""
        return holdings(self.db, now)

    def waiting_jobs(self) -> tuple[dict[str, int], datetime | None]:
        """Waiting queued jobs per owner and the oldest one's creation (see `waiting_jobs`)."""
        return waiting_jobs(self.db)

    def open_violations(self, kinds: Collection[str]) -> dict[str, int]:
        """{kind: how many are open} of the violations of `kinds` not ended (the same on
        every replica; the index of open violations)."""
        v = violations
        query = (
            select(v.c.kind, func.count())
            .where(v.c.ended_at.is_(None), v.c.kind.in_(sorted(kinds)))
            .group_by(v.c.kind)
        )
        with self.db.read() as conn:
            return {kind: int(n) for kind, n in conn.execute(query)}
