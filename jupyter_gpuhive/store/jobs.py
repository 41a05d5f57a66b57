"""Jobs and their tasks: one row per job, one per task; task states change by compare-and-set."""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, insert, or_, select, update

from ..errors import Conflict, NotFound
from ..model import Gpu, utcnow
from ..model.errand import Errand
from ..model.jobs import (
    ACTIVE,
    DEFAULT_LOG_DIR,
    Job,
    Task,
    TaskSpec,
    TaskState,
    job_status,
    task_paths,
    task_session,
)
from .database import Database
from .jobrows import (
    HANDLE_COLUMN,
    job_of,
    job_values,
    pending_values,
    seconds,
    task_of,
    task_query,
)
from .preemption import histories, lent_from
from .schema import job_tasks, jobs

_KEEP: Any = object()
# Job columns a caller may change with `Jobs.update`.
EDITABLE = frozenset(
    {
        "name",
        "description",
        "queued",
        "walltime",
        "start_at",
        "stop_at",
        "max_retries",
        "attempts",
    }
)


@dataclass(frozen=True)
class TaskChange:
    """New values for one task; fields left at KEEP stay as they are (None clears)."""

    task_id: int
    state: TaskState
    exit_status: int | None = _KEEP
    handle: int | None = _KEEP
    pgid: int | None = _KEEP
    started_at: datetime | None = _KEEP
    ended_at: datetime | None = _KEEP
    last_error: str | None = _KEEP

    def values(self) -> dict[str, Any]:
        """The changed fields, by the name of the Task's field."""
        names = ("exit_status", "handle", "pgid", "started_at", "ended_at", "last_error")
        found = {name: getattr(self, name) for name in names}
        return {"state": str(self.state)} | {k: v for k, v in found.items() if v is not _KEEP}

    def columns(self) -> dict[str, Any]:
        """The changed fields, by the name of their column (`handle` is kept in the column
        `screen_pid`, its name from before the task runner seam: no migration needed)."""
        return {HANDLE_COLUMN if k == "handle" else k: v for k, v in self.values().items()}


def _not_over() -> Any:
    """What the scheduler looks at: jobs with an active task; pending ones it may start or
    stop (queued, or with a start or stop time); queued without tasks (GPUs chosen at
    admission), queued and failed with retries left, or marked for a requeue.

    Not: pending jobs that wait for their owner to start them. Nothing of the scheduler's
    applies to them (their tasks claim no GPU), and a site accumulates them: the benchmark's
    800 made every tick read 800 jobs with their tasks, on the leader, every poll."""
    active = [str(s) for s in ACTIVE]
    failed = [str(TaskState.FAILED), str(TaskState.LOST)]
    has = select(job_tasks.c.id).where(job_tasks.c.job_id == jobs.c.id)
    timed = or_(jobs.c.queued.is_(True), jobs.c.start_at.is_not(None), jobs.c.stop_at.is_not(None))
    return or_(
        has.where(job_tasks.c.state.in_(active)).exists(),
        and_(timed, has.where(job_tasks.c.state == str(TaskState.PENDING)).exists()),
        and_(jobs.c.queued.is_(True), ~has.exists()),
        and_(
            jobs.c.queued.is_(True),
            jobs.c.attempts < jobs.c.max_retries,
            has.where(job_tasks.c.state.in_(failed)).exists(),
        ),
        jobs.c.requeue_reason.is_not(None),
    )


class Jobs:
    """Job and task rows; state changes name the states they expect, so none is clobbered."""

    def __init__(self, db: Database, log_dir: str = DEFAULT_LOG_DIR) -> None:
        self.db = db
        self.log_dir = log_dir

    # --- writing ------------------------------------------------------------------

    def create(self, job: Job, specs: Sequence[TaskSpec], errand: Errand | None = None) -> Job:
        """Store a job and its tasks (in the given order) in one transaction (`errand`: the
        API request it is part of)."""
        now = utcnow()

        def work(conn: Connection) -> int:
            values = job_values(job) | {"attempts": 0, "created_at": now, "updated_at": now}
            job_id = int(conn.execute(insert(jobs).values(**values)).inserted_primary_key[0])  # type: ignore[index]
            rows = self._task_rows(job_id, job.name, job.owner, specs)
            if rows:
                conn.execute(insert(job_tasks), rows)
            return job_id

        return self.get(self.db.write(work, errand=errand))

    def _task_rows(
        self, job_id: int, name: str, owner: str, specs: Sequence[TaskSpec]
    ) -> list[dict[str, Any]]:
        """Pending task rows for `specs`, numbered in order."""
        rows = []
        tag = secrets.token_hex(3)
        for index, spec in enumerate(specs):
            log_path, exit_path = task_paths(self.log_dir, owner, job_id, index, tag)
            rows.append(
                {
                    "job_id": job_id,
                    "idx": index,
                    "host": spec.host,
                    "address": spec.address,
                    "role": spec.role,
                    "gpus": json.dumps([gpu.uuid for gpu in spec.gpus]),
                    "gpu_indices": json.dumps([gpu.index for gpu in spec.gpus]),
                    "command": spec.command,
                    "env": json.dumps(spec.env),
                    "workdir": spec.workdir,
                    "variables": json.dumps(spec.variables),
                    "session": task_session(job_id, name, index),
                    "log_path": log_path,
                    "exit_path": exit_path,
                    "state": str(TaskState.PENDING),
                }
            )
        return rows

    def replace_tasks(self, job_id: int, specs: Sequence[TaskSpec]) -> Job:
        """Swap a job's tasks for new pending ones (GPUs bound at admission): only while every
        task is still pending, so that a stop made after the queue chose the job holds."""

        def work(conn: Connection) -> None:
            self._refuse_active(conn, job_id, "re-plan")
            locked = conn.execute(
                select(jobs.c.queued).where(jobs.c.id == job_id).with_for_update()
            ).one()
            if not locked.queued:
                raise Conflict(f"Job {job_id} left the queue before it could be placed.")
            moved = conn.execute(
                select(job_tasks.c.idx, job_tasks.c.state).where(
                    job_tasks.c.job_id == job_id, job_tasks.c.state != str(TaskState.PENDING)
                )
            ).first()
            if moved is not None:
                raise Conflict(
                    f"Job {job_id} changed before it could be placed "
                    f"(task {moved.idx} is {moved.state})."
                )
            row = conn.execute(select(jobs.c.name, jobs.c.owner).where(jobs.c.id == job_id)).one()
            conn.execute(delete(job_tasks).where(job_tasks.c.job_id == job_id))
            rows = self._task_rows(job_id, row.name, row.owner, specs)
            if rows:
                conn.execute(insert(job_tasks), rows)
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(updated_at=utcnow()))

        self.db.write(work)
        return self.get(job_id)

    def withdraw(self, job_id: int) -> bool:
        """Take a job the queue has not placed yet (no tasks) out of the queue, in one
        transaction with its row locked against a concurrent placement; False if it has
        tasks by now (stop those instead)."""

        def work(conn: Connection) -> bool:
            found = conn.execute(
                select(jobs.c.id).where(jobs.c.id == job_id).with_for_update()
            ).first()
            if found is None:
                raise NotFound(f"There is no job {job_id}.")
            placed = conn.execute(
                select(job_tasks.c.id).where(job_tasks.c.job_id == job_id).limit(1)
            ).first()
            if placed is not None:
                return False
            conn.execute(
                update(jobs).where(jobs.c.id == job_id).values(queued=False, updated_at=utcnow())
            )
            return True

        return bool(self.db.write(work))

    def mark_requeue(self, job_id: int, reason: str | None) -> None:
        """Note (or clear, with None) that the scheduler stops this job to queue it again."""

        def work(conn: Connection) -> None:
            stmt = update(jobs).where(jobs.c.id == job_id).values(requeue_reason=reason)
            if not conn.execute(stmt).rowcount:
                raise NotFound(f"There is no job {job_id}.")

        self.db.write(work)

    def requeue(
        self,
        job_id: int,
        *,
        expect: Collection[str],
        note: str | None = None,
        count_attempt: bool = False,
    ) -> bool:
        """Put a job whose status is in `expect` back to pending in one transaction.

        Clears the requeue mark, keeps `note` as the tasks' last_error and, with
        `count_attempt`, adds one to `attempts`. False (and no change) when the job is gone,
        still active, or no longer in an expected status: each outcome is acted on once.
        """

        def work(conn: Connection) -> bool:
            states = conn.execute(
                select(job_tasks.c.state).where(job_tasks.c.job_id == job_id)
            ).scalars()
            status = job_status(TaskState(s) for s in states)
            if status not in expect:
                return False
            found = conn.execute(select(jobs.c.attempts).where(jobs.c.id == job_id)).first()
            if found is None:
                return False
            values: dict[str, Any] = {"requeue_reason": None, "updated_at": utcnow()}
            if count_attempt:
                values["attempts"] = found.attempts + 1
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))
            conn.execute(
                update(job_tasks).where(job_tasks.c.job_id == job_id).values(**pending_values(note))
            )
            return True

        return self.db.write(work)

    def update(self, job_id: int, by: str | None = None, **changes: Any) -> Job:
        """Change a job's own fields (see EDITABLE); its tasks stay as they are."""
        unknown = sorted(set(changes) - EDITABLE)
        if unknown:
            raise ValueError(f"not editable: {', '.join(unknown)}")
        values = dict(changes)
        if "walltime" in values:
            walltime = values.pop("walltime")
            values["walltime_s"] = seconds(walltime)

        if by is not None:
            values["updated_by"] = by

        def work(conn: Connection) -> None:
            stmt = update(jobs).where(jobs.c.id == job_id)
            done = conn.execute(stmt.values(updated_at=utcnow(), **values))
            if not done.rowcount:
                raise NotFound(f"There is no job {job_id}.")

        self.db.write(work)
        return self.get(job_id)

    def change_tasks(
        self, changes: Iterable[TaskChange], expect: Collection[TaskState] | None = None
    ) -> list[int]:
        """Apply changes in one transaction; with `expect`, only to tasks in those states."""
        todo = list(changes)
        if not todo:
            return []

        def work(conn: Connection) -> list[int]:
            done = []
            for change in todo:
                stmt = update(job_tasks).where(job_tasks.c.id == change.task_id)
                if expect is not None:
                    stmt = stmt.where(job_tasks.c.state.in_([str(s) for s in expect]))
                if conn.execute(stmt.values(**change.columns())).rowcount:
                    done.append(change.task_id)
            return done

        return self.db.write(work)

    def place_task(self, task_id: int, host: str, address: str, gpus: Sequence[Gpu]) -> bool:
        """Record the host and GPUs a batch system gave an active task that had none (once)."""
        stmt = update(job_tasks).where(job_tasks.c.id == task_id, job_tasks.c.gpus == "[]",
                                       job_tasks.c.state.in_([str(s) for s in ACTIVE]))  # fmt: skip
        values = {"host": host, "address": address, "gpus": json.dumps([g.uuid for g in gpus]),
                  "gpu_indices": json.dumps([g.index for g in gpus])}  # fmt: skip
        return bool(self.db.write(lambda conn: conn.execute(stmt.values(**values)).rowcount))

    def reset(self, job_id: int, task_ids: Collection[int] | None = None) -> Job:
        """Put finished (or never started) tasks back to pending, e.g. before a restart."""

        def work(conn: Connection) -> None:
            self._refuse_active(conn, job_id, "reset")
            stmt = update(job_tasks).where(job_tasks.c.job_id == job_id)
            if task_ids is not None:
                stmt = stmt.where(job_tasks.c.id.in_(list(task_ids)))
            conn.execute(stmt.values(**pending_values(None)))

        self.db.write(work)
        return self.get(job_id)

    def delete(self, job_id: int) -> None:
        """Remove a job and its tasks; refused while any task may still run."""

        def work(conn: Connection) -> None:
            self._refuse_active(conn, job_id, "delete")
            conn.execute(delete(job_tasks).where(job_tasks.c.job_id == job_id))
            conn.execute(delete(jobs).where(jobs.c.id == job_id))

        self.db.write(work)

    def _refuse_active(self, conn: Connection, job_id: int, what: str) -> None:
        if conn.execute(select(jobs.c.id).where(jobs.c.id == job_id)).first() is None:
            raise NotFound(f"There is no job {job_id}.")
        busy = conn.execute(
            select(job_tasks.c.idx, job_tasks.c.state).where(
                job_tasks.c.job_id == job_id,
                job_tasks.c.state.in_([str(s) for s in ACTIVE]),
            )
        ).all()
        if busy:
            listed = ", ".join(f"task {row.idx} is {row.state}" for row in busy)
            raise Conflict(f"Cannot {what} job {job_id} while it runs ({listed}); stop it first.")

    # --- reading ------------------------------------------------------------------

    def get(self, job_id: int) -> Job:
        """One job with its tasks."""
        found = self._load(select(jobs).where(jobs.c.id == job_id))
        if not found:
            raise NotFound(f"There is no job {job_id}.")
        return found[0]

    def all(
        self,
        *,
        owner: str | None = None,
        statuses: Collection[str] | None = None,
        queued: bool | None = None,
    ) -> list[Job]:
        """Jobs by id, optionally of one owner, with a derived status among `statuses`."""
        query = select(jobs).order_by(jobs.c.id)
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        if queued is not None:
            query = query.where(jobs.c.queued.is_(queued))
        found = self._load(query)
        if statuses is not None:
            found = [job for job in found if job.status in statuses]
        return found

    def recent(
        self, *, owner: str | None = None, limit: int, status: str | None = None
    ) -> tuple[list[Job], bool]:
        """The newest `limit` jobs (of `owner`; in the derived `status`) and every job that
        runs now (a task starting, running or stopping) besides them, by id; and whether
        older ones were left out."""
        if status is not None:  # derived from the tasks: filtered here, after reading
            every = [job for job in self.all(owner=owner) if job.status == status]
            return every[-limit:], len(every) > limit
        newest = select(jobs.c.id).order_by(jobs.c.id.desc()).limit(limit + 1)
        if owner is not None:
            newest = newest.where(jobs.c.owner == owner)
        active = [str(s) for s in ACTIVE]
        running = jobs.c.id.in_(select(job_tasks.c.job_id).where(job_tasks.c.state.in_(active)))
        with self.db.read() as conn:
            ids = list(conn.execute(newest).scalars())
            query = select(jobs).where(or_(jobs.c.id.in_(ids[:limit]), running))
            if owner is not None:
                query = query.where(jobs.c.owner == owner)
            found = self._load_in(conn, query.order_by(jobs.c.id))
        return found, len(ids) > limit

    def schedulable(self) -> tuple[list[Job], dict[int, str]]:
        """Jobs the scheduler looks at, and the requeue reasons of those marked (`_not_over`)."""
        query = select(jobs).where(_not_over()).order_by(jobs.c.id)
        found = self._load(query)
        with self.db.read() as conn:
            marked = conn.execute(
                select(jobs.c.id, jobs.c.requeue_reason).where(jobs.c.requeue_reason.is_not(None))
            ).all()
        return found, {row.id: row.requeue_reason for row in marked}

    def tasks(
        self, states: Collection[TaskState] | None = None, *, job_id: int | None = None
    ) -> list[Task]:
        """Tasks (of every job, or one), optionally only those in `states`."""
        query = task_query()
        if states is not None:
            query = query.where(job_tasks.c.state.in_([str(s) for s in states]))
        if job_id is not None:
            query = query.where(job_tasks.c.job_id == job_id)
        with self.db.read() as conn:
            return [task_of(row) for row in conn.execute(query).all()]

    def task(self, task_id: int) -> Task:
        """One task by id."""
        with self.db.read() as conn:
            row = conn.execute(task_query().where(job_tasks.c.id == task_id)).first()
        if row is None:
            raise NotFound(f"There is no task {task_id}.")
        return task_of(row)

    def _load(self, query: Any) -> list[Job]:
        with self.db.read() as conn:
            return self._load_in(conn, query)

    def _load_in(self, conn: Connection, query: Any) -> list[Job]:
        rows = conn.execute(query).all()
        ids = [row.id for row in rows]
        by_job: dict[int, list[Task]] = {}
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            tasks_query = task_query().where(job_tasks.c.job_id.in_(chunk))
            for row in conn.execute(tasks_query).all():
                task = task_of(row)
                by_job.setdefault(task.job_id, []).append(task)
        preemptible = [row.id for row in rows if row.preemptible]
        history = histories(conn, preemptible) if preemptible else {}
        lent = lent_from(conn, preemptible) if preemptible else {}
        return [
            job_of(row, by_job.get(row.id, []), history.get(row.id, ()), lent.get(row.id))
            for row in rows
        ]


__all__ = ["EDITABLE", "Jobs", "TaskChange"]
