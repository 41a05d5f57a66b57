"""Loans of reserved GPUs to preemptible jobs, the jobs' preemption history, and each
reservation's lending choice (migration 0019)."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, delete, insert, select, update

from ..errors import NotFound
from ..model.jobs import JobEvent, Loan
from .database import Database
from .jobrows import pending_values
from .schema import job_events, job_loans, job_tasks, jobs, reservation_lending

PREEMPTED = "preempted"
RESUMED = "resumed"
EXHAUSTED = "exhausted"


def loan_of(row: Any) -> Loan:
    return Loan(
        id=row.id,
        job_id=row.job_id,
        reservation_id=row.reservation_id,
        gpus=tuple(json.loads(row.gpus)),
        since=row.since,
        reclaimed_at=row.reclaimed_at,
        reclaim_reason=row.reclaim_reason,
        ended_at=row.ended_at,
    )


def event_of(row: Any) -> JobEvent:
    return JobEvent(row.at, row.kind, row.detail, row.reservation_id, row.gpu_s)


def histories(conn: Connection, job_ids: Collection[int]) -> dict[int, list[JobEvent]]:
    """The history of each of `job_ids` that has one, oldest first."""
    query = select(job_events).where(job_events.c.job_id.in_(list(job_ids)))
    found: dict[int, list[JobEvent]] = {}
    for row in conn.execute(query.order_by(job_events.c.id)).all():
        found.setdefault(row.job_id, []).append(event_of(row))
    return found


def lent_from(conn: Connection, job_ids: Collection[int]) -> dict[int, int]:
    """The reservation each of `job_ids` runs on now (its open loan), where it has one."""
    query = select(job_loans.c.job_id, job_loans.c.reservation_id).where(
        job_loans.c.job_id.in_(list(job_ids)), job_loans.c.ended_at.is_(None)
    )
    return {row.job_id: row.reservation_id for row in conn.execute(query.order_by(job_loans.c.id))}


def run_gpu_s(conn: Connection, job_id: int, at: datetime) -> float:
    """The GPU-seconds the job's tasks have run by `at` in their current run."""
    query = select(job_tasks.c.gpus, job_tasks.c.started_at, job_tasks.c.ended_at)
    total = 0.0
    for row in conn.execute(query.where(job_tasks.c.job_id == job_id)).all():
        if row.started_at is not None:
            end = min(row.ended_at or at, at)
            total += max(0.0, (end - row.started_at).total_seconds()) * len(json.loads(row.gpus))
    return total


# Each reservation's lending choice, and the jobs its open loans run: what a reservation's
# JSON shows of lending (`Shown.reservation`).
LendingShown = tuple[dict[int, tuple[bool, bool]], dict[int, list[dict[str, Any]]]]


def lending_of(
    conn: Connection, ids: Collection[int] | Select[Any]
) -> dict[int, tuple[bool, bool]]:
    """(lend, reclaim_before_start) of the reservations `ids` (a list, or a SELECT of ids
    read in the same statement); the defaults (True, False) where a booking chose nothing.
    With a SELECT, only the reservations that have a row are in the answer."""
    found = dict.fromkeys(ids, (True, False)) if not isinstance(ids, Select) else {}
    table = reservation_lending
    query = select(table).where(table.c.reservation_id.in_(ids))
    for row in conn.execute(query).all():
        found[row.reservation_id] = (bool(row.lend), bool(row.reclaim_before_start))
    return found


def choose_lending(
    conn: Connection, reservation_id: int, lend: bool | None, early: bool | None
) -> tuple[bool, bool]:
    """Write a reservation's lending choice in the caller's transaction (None keeps that part
    of the stored one, or the default); the choice now. The defaults need no row."""
    had = lending_of(conn, [reservation_id])[reservation_id]
    choice = (had[0] if lend is None else lend, had[1] if early is None else early)
    table = reservation_lending
    conn.execute(delete(table).where(table.c.reservation_id == reservation_id))
    if choice != (True, False):
        values = {"lend": choice[0], "reclaim_before_start": choice[1]}
        conn.execute(insert(table).values(reservation_id=reservation_id, **values))
    return choice


def lent_to_of(
    conn: Connection, ids: Collection[int] | Select[Any]
) -> dict[int, list[dict[str, Any]]]:
    """Per reservation of `ids` (a list, or a SELECT of ids), the jobs its open loans run
    (job, name, owner, preemptible); with a SELECT, only those that lend to a job."""
    found: dict[int, list[dict[str, Any]]] = (
        {rid: [] for rid in ids} if not isinstance(ids, Select) else {}
    )
    query = (
        select(job_loans.c.reservation_id, jobs.c.id, jobs.c.name, jobs.c.owner)
        .join(jobs, jobs.c.id == job_loans.c.job_id)
        .where(job_loans.c.reservation_id.in_(ids), job_loans.c.ended_at.is_(None))
        .order_by(job_loans.c.id)
    )
    for row in conn.execute(query).all():
        found.setdefault(row.reservation_id, []).append(
            {"job": row.id, "name": row.name, "owner": row.owner, "preemptible": True}
        )
    return found


class Preemption:
    """Loans, lending choices and preemption events; each change is one transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- lending choices ----------------------------------------------------------------

    def lending(self, reservation_ids: Iterable[int]) -> dict[int, tuple[bool, bool]]:
        """(lend, reclaim_before_start) of each reservation; the defaults (True, False)
        where the booking made no choice."""
        ids = list(reservation_ids)
        if not ids:
            return {}
        with self.db.read() as conn:
            return lending_of(conn, ids)

    def set_lending(
        self, reservation_id: int, lend: bool | None, reclaim_before_start: bool | None
    ) -> tuple[bool, bool]:
        """Change a booking's lending choice (None keeps a part), in one transaction; the
        choice now. Only bookings/ calls it (tests/test_architecture.py): the event follows."""
        return self.db.write(
            lambda conn: choose_lending(conn, reservation_id, lend, reclaim_before_start)
        )

    # --- loans -------------------------------------------------------------------------

    def open_loans(self, reservation_id: int | None = None) -> list[Loan]:
        """Loans not ended (of one reservation when given), oldest first."""
        query = select(job_loans).where(job_loans.c.ended_at.is_(None)).order_by(job_loans.c.id)
        if reservation_id is not None:
            query = query.where(job_loans.c.reservation_id == reservation_id)
        with self.db.read() as conn:
            return [loan_of(row) for row in conn.execute(query).all()]

    def lend(self, job_id: int, reservation_id: int, gpus: Iterable[str], at: datetime) -> Loan:
        """Open a loan of `gpus` of the reservation to the job (the open one if there is)."""

        def work(conn: Connection) -> int:
            same = select(job_loans.c.id).where(
                job_loans.c.job_id == job_id,
                job_loans.c.reservation_id == reservation_id,
                job_loans.c.ended_at.is_(None),
            )
            found = conn.execute(same).scalar()
            if found is not None:
                return int(found)
            values = {"job_id": job_id, "reservation_id": reservation_id,
                      "gpus": json.dumps(sorted(gpus)), "since": at}  # fmt: skip
            return int(conn.execute(insert(job_loans).values(**values)).inserted_primary_key[0])  # type: ignore[index]

        loan_id = self.db.write(work)
        with self.db.read() as conn:
            return loan_of(conn.execute(select(job_loans).where(job_loans.c.id == loan_id)).one())

    def reclaim(self, job_id: int, at: datetime, reason: str, signal: str, grace: float) -> bool:
        """Mark the job's open loans reclaimed, count the preemption (`restarts`) and write
        the `preempted` event, in one transaction; False when it was reclaimed already (or
        has no open loan): each reclaim is acted on once."""

        def work(conn: Connection) -> bool:
            open_ = (job_loans.c.job_id == job_id) & job_loans.c.ended_at.is_(None)
            loans = conn.execute(select(job_loans).where(open_)).all()
            if not loans or any(row.reclaimed_at is not None for row in loans):
                return False
            conn.execute(update(job_loans).where(open_).values(reclaimed_at=at,
                                                               reclaim_reason=reason))  # fmt: skip
            row = conn.execute(select(jobs.c.restarts).where(jobs.c.id == job_id)).one()
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(restarts=row.restarts + 1))
            detail = f"{reason}; sent {signal}, {grace:g} s to checkpoint"
            conn.execute(insert(job_events).values(job_id=job_id, at=at, kind=PREEMPTED,
                         reservation_id=loans[0].reservation_id, detail=detail,
                         gpu_s=run_gpu_s(conn, job_id, at)))  # fmt: skip
            return True

        return self.db.write(work)

    def preempt(self, job_id: int, at: datetime, reason: str, signal: str, grace: float) -> bool:
        """Preempt a running job that borrows nothing, for a waiting job (least attained
        service): mark it to be requeued (`requeue_reason`: a restart finishes the stop),
        count the preemption and write the `preempted` event, in one transaction; False
        when it is marked already (being stopped): each preemption is acted on once."""

        def work(conn: Connection) -> bool:
            row = conn.execute(
                select(jobs.c.restarts, jobs.c.requeue_reason).where(jobs.c.id == job_id)
            ).first()
            if row is None or row.requeue_reason is not None:
                return False
            conn.execute(update(jobs).where(jobs.c.id == job_id)
                         .values(restarts=row.restarts + 1, requeue_reason=reason))  # fmt: skip
            detail = f"{reason}; sent {signal}, {grace:g} s to checkpoint"
            conn.execute(insert(job_events).values(job_id=job_id, at=at, kind=PREEMPTED,
                         detail=detail, gpu_s=run_gpu_s(conn, job_id, at)))  # fmt: skip
            return True

        return self.db.write(work)

    def end_loans(self, job_id: int, at: datetime, reservation_id: int | None = None) -> int:
        """End the job's open loans (of one reservation when given); how many ended."""

        def work(conn: Connection) -> int:
            stmt = update(job_loans).where(
                job_loans.c.job_id == job_id, job_loans.c.ended_at.is_(None)
            )
            if reservation_id is not None:
                stmt = stmt.where(job_loans.c.reservation_id == reservation_id)
            return int(conn.execute(stmt.values(ended_at=at)).rowcount)

        return self.db.write(work)

    def requeue(self, job_id: int, at: datetime, note: str) -> bool:
        """Put a preempted job that has stopped back to pending and end its loans, in one
        transaction; False (no change) when it is not stopped (it ended by itself)."""

        def work(conn: Connection) -> bool:
            states = set(conn.execute(
                select(job_tasks.c.state).where(job_tasks.c.job_id == job_id)
            ).scalars())  # fmt: skip
            conn.execute(update(job_loans).where(job_loans.c.job_id == job_id,
                         job_loans.c.ended_at.is_(None)).values(ended_at=at))  # fmt: skip
            if not states or states - {"stopped", "pending"}:
                return False
            conn.execute(update(jobs).where(jobs.c.id == job_id)
                         .values(requeue_reason=None, updated_at=at))  # fmt: skip
            conn.execute(
                update(job_tasks).where(job_tasks.c.job_id == job_id).values(**pending_values(note))
            )
            return True

        return self.db.write(work)

    def shown(self, reservation_ids: Iterable[int]) -> LendingShown:
        """`lending` and `lent_to` of the reservations, in one read."""
        ids = list(reservation_ids)
        if not ids:
            return {}, {}
        with self.db.read() as conn:
            return lending_of(conn, ids), lent_to_of(conn, ids)

    # --- history -----------------------------------------------------------------------

    def event(self, job_id: int, at: datetime, kind: str, detail: str,
              reservation_id: int | None = None) -> None:  # fmt: skip
        """Add an entry to the job's history."""

        def work(conn: Connection) -> None:
            if conn.execute(select(jobs.c.id).where(jobs.c.id == job_id)).first() is None:
                raise NotFound(f"There is no job {job_id}.")
            conn.execute(insert(job_events).values(job_id=job_id, at=at, kind=kind,
                         reservation_id=reservation_id, detail=detail))  # fmt: skip

        self.db.write(work)

    def history(self, job_id: int) -> list[JobEvent]:
        with self.db.read() as conn:
            return histories(conn, [job_id]).get(job_id, [])


__all__ = [
    "EXHAUSTED",
    "PREEMPTED",
    "RESUMED",
    "LendingShown",
    "Preemption",
    "histories",
    "lending_of",
    "lent_from",
    "lent_to_of",
]
