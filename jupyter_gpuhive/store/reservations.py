"""Reservations: a set of GPUs × [start, end); the database refuses overlaps on any GPU."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, delete, exists, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from ..errors import Conflict, NotFound
from ..model import Gpu, Reservation, utcnow
from .database import EXCLUSION_VIOLATION, Database, sqlstate
from .inventory import Inventory
from .schema import reservation_gpus, reservation_stats, reservations

_CHUNK = 5000
# The columns _build unpacks, in this order.
_COLUMNS = (
    reservations.c.id,
    reservations.c.owner,
    reservations.c.title,
    reservations.c.description,
    reservations.c.start_at,
    reservations.c.end_at,
    reservations.c.created_at,
    reservations.c.cancelled_at,
    reservations.c.flagged,
    reservations.c.flag_reason,
)


@dataclass(frozen=True)
class Clash:
    """An existing reservation that overlaps a requested one on one GPU."""

    reservation_id: int
    owner: str
    title: str
    gpu: Gpu
    start: datetime
    end: datetime

    def describe(self) -> str:
        span = f"{self.start:%Y-%m-%d %H:%M}–{self.end:%Y-%m-%d %H:%M} UTC"
        return f"{self.gpu.ref} is reserved by {self.owner} ('{self.title}', {span})"

    def to_json(self) -> dict[str, Any]:
        return {
            "reservation": self.reservation_id,
            "owner": self.owner,
            "title": self.title,
            "gpu": self.gpu.ref,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
        }


def clash_error(clashes: Sequence[Clash]) -> Conflict:
    """A 409 that names every conflicting reservation."""
    shown = "; ".join(c.describe() for c in clashes[:5])
    more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
    return Conflict(
        f"Those GPUs are not free for that time: {shown}{more}.",
        conflicts=[c.to_json() for c in clashes],
    )


@dataclass(frozen=True)
class Changes:
    """New values for a reservation; None keeps the old one."""

    title: str | None = None
    description: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    gpu_ids: tuple[int, ...] | None = None
    cancelled_at: datetime | None = None


@dataclass(frozen=True)
class Booking:
    """What a write is about to store, for a guard to check inside the same transaction."""

    owner: str
    start: datetime
    end: datetime
    gpu_ids: tuple[int, ...]
    old: Reservation | None = None  # the reservation before an edit


# Called inside the write transaction before the row is written; raises to refuse it.
Guard = Callable[[Connection, Booking], None]


def _is_overlap(error: IntegrityError) -> bool:
    return sqlstate(error) == EXCLUSION_VIOLATION or "overlapping reservation" in str(error)


class Reservations:
    """Reservation rows; every write is one transaction that re-checks for clashes."""

    def __init__(self, db: Database, inventory: Inventory) -> None:
        self.db = db
        self.inventory = inventory

    # --- reading -----------------------------------------------------------------

    def _build(self, conn: Connection, rows: Sequence[Any]) -> list[Reservation]:
        ids = [row.id for row in rows]
        gpu_ids: dict[int, list[int]] = {}
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            query = select(reservation_gpus.c.reservation_id, reservation_gpus.c.gpu_id).where(
                reservation_gpus.c.reservation_id.in_(chunk)
            )
            for rid, gid in conn.execute(query).all():
                gpu_ids.setdefault(rid, []).append(gid)
        gpu = self.inventory.gpu_by_id
        out = []
        for row in rows:
            rid, owner, title, description, start, end, created, cancelled, flagged, reason = row
            booked = [gpu(g) for g in gpu_ids.get(rid, ())]
            if len(booked) > 1:
                booked.sort(key=_gpu_order)
            out.append(
                Reservation(
                    rid,
                    owner,
                    title,
                    description,
                    start,
                    end,
                    tuple(booked),
                    created,
                    cancelled,
                    flagged,
                    reason,
                )
            )
        return out

    def get(self, reservation_id: int) -> Reservation:
        """One reservation by id, cancelled ones included."""
        with self.db.read() as conn:
            rows = conn.execute(select(*_COLUMNS).where(reservations.c.id == reservation_id)).all()
            if not rows:
                raise NotFound(f"There is no reservation {reservation_id}.")
            return self._build(conn, rows)[0]

    def window(
        self,
        start: datetime,
        end: datetime,
        *,
        gpu_ids: Iterable[int] | None = None,
        owner: str | None = None,
        include_cancelled: bool = False,
        limit: int | None = None,
    ) -> list[Reservation]:
        """Reservations overlapping [start, end), ordered by start."""
        with self.db.read() as conn:
            longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
            query = select(*_COLUMNS).where(
                reservations.c.start_at < end,
                reservations.c.end_at > start,
                reservations.c.start_at >= start - timedelta(seconds=longest + 1),
            )
            if not include_cancelled:
                query = query.where(reservations.c.cancelled_at.is_(None))
            if owner is not None:
                query = query.where(reservations.c.owner == owner)
            if gpu_ids is not None:
                query = query.where(
                    exists().where(
                        reservation_gpus.c.reservation_id == reservations.c.id,
                        reservation_gpus.c.gpu_id.in_(list(gpu_ids)),
                    )
                )
            query = query.order_by(reservations.c.start_at, reservations.c.id)
            if limit is not None:
                query = query.limit(limit)
            # One statement: the chosen reservations joined with their GPUs (a bound IN list
            # of thousands of ids cost more than the query itself).
            chosen = query.with_only_columns(reservations.c.id).subquery()
            joined = (
                select(*_COLUMNS, reservation_gpus.c.gpu_id)
                .join(reservation_gpus, reservation_gpus.c.reservation_id == reservations.c.id)
                .where(reservations.c.id.in_(select(chosen.c.id)))
                .order_by(reservations.c.start_at, reservations.c.id)
            )
            return self._build_joined(conn.execute(joined).all())

    def _build_joined(self, rows: Sequence[Any]) -> list[Reservation]:
        """Reservations from rows of (reservation columns…, gpu_id), grouped in order."""
        gpu = self.inventory.gpu_by_id
        out: list[Reservation] = []
        last_id = None
        booked: list[Gpu] = []
        for row in rows:
            rid = row[0]
            if rid != last_id:
                if out and len(booked) > 1:
                    booked.sort(key=_gpu_order)
                if out:
                    out[-1].gpus = tuple(booked)
                booked = []
                last_id = rid
                _, owner, title, text, start, end, created, cancelled, flagged, why = row[:10]
                out.append(
                    Reservation(
                        rid, owner, title, text, start, end, (), created, cancelled, flagged, why
                    )
                )
            booked.append(gpu(row[10]))
        if out:
            if len(booked) > 1:
                booked.sort(key=_gpu_order)
            out[-1].gpus = tuple(booked)
        return out

    def clashes(
        self,
        conn: Connection,
        gpu_ids: Sequence[int],
        start: datetime,
        end: datetime,
        exclude: int | None = None,
    ) -> list[Clash]:
        """Live reservations overlapping [start, end) on any of `gpu_ids`."""
        rg, r = reservation_gpus, reservations
        query = (
            select(rg.c.gpu_id, r.c.id, r.c.owner, r.c.title, r.c.start_at, r.c.end_at)
            .join(r, r.c.id == rg.c.reservation_id)
            .where(
                rg.c.gpu_id.in_(list(gpu_ids)),
                rg.c.cancelled.is_(False),
                rg.c.start_at < end,
                rg.c.end_at > start,
            )
            .order_by(rg.c.start_at)
        )
        if exclude is not None:
            query = query.where(rg.c.reservation_id != exclude)
        gpu = self.inventory.gpu_by_id
        return [
            Clash(row.id, row.owner, row.title, gpu(row.gpu_id), row.start_at, row.end_at)
            for row in conn.execute(query)
        ]

    # --- writing -----------------------------------------------------------------

    def create(
        self,
        owner: str,
        title: str,
        description: str,
        start: datetime,
        end: datetime,
        gpu_ids: Sequence[int],
        guard: Guard | None = None,
    ) -> Reservation:
        """Insert a reservation, or raise Conflict naming the reservations in the way."""
        created = utcnow()

        def work(conn: Connection) -> int:
            if guard is not None:
                guard(conn, Booking(owner, start, end, tuple(gpu_ids)))
            found = self.clashes(conn, gpu_ids, start, end)
            if found:
                raise clash_error(found)
            rid = conn.execute(
                insert(reservations).values(
                    owner=owner,
                    title=title,
                    description=description,
                    start_at=start,
                    end_at=end,
                    created_at=created,
                    flagged=False,
                )
            ).inserted_primary_key[0]  # type: ignore[index]
            conn.execute(
                insert(reservation_gpus),
                [
                    {
                        "reservation_id": rid,
                        "gpu_id": gid,
                        "start_at": start,
                        "end_at": end,
                        "cancelled": False,
                    }
                    for gid in gpu_ids
                ],
            )
            _note_length(conn, start, end)
            return int(rid)

        rid = self._write(work, gpu_ids, start, end, None)
        gpus = tuple(sorted((self.inventory.gpu_by_id(g) for g in gpu_ids), key=_gpu_order))
        return Reservation(rid, owner, title, description, start, end, gpus, created)

    def modify(
        self,
        reservation_id: int,
        decide: Callable[[Reservation], Changes],
        guard: Guard | None = None,
    ) -> Reservation:
        """Apply the changes `decide` returns for the current row, atomically."""

        def work(conn: Connection) -> int:
            rows = conn.execute(
                select(*_COLUMNS).where(reservations.c.id == reservation_id).with_for_update()
            ).all()
            if not rows:
                raise NotFound(f"There is no reservation {reservation_id}.")
            old = self._build(conn, rows)[0]
            change = decide(old)
            start, end = change.start or old.start, change.end or old.end
            gpu_ids = change.gpu_ids or tuple(g.id for g in old.gpus)
            cancelled = change.cancelled_at is not None
            if not cancelled:
                if guard is not None:
                    guard(conn, Booking(old.owner, start, end, tuple(gpu_ids), old))
                found = self.clashes(conn, gpu_ids, start, end, exclude=reservation_id)
                if found:
                    raise clash_error(found)
            values: dict[str, Any] = {"start_at": start, "end_at": end}
            if change.title is not None:
                values["title"] = change.title
            if change.description is not None:
                values["description"] = change.description
            if cancelled:
                values["cancelled_at"] = change.cancelled_at
            conn.execute(
                update(reservations).where(reservations.c.id == reservation_id).values(**values)
            )
            rg = reservation_gpus
            old_ids = {g.id for g in old.gpus}
            if set(gpu_ids) != old_ids:
                conn.execute(
                    delete(rg).where(
                        rg.c.reservation_id == reservation_id,
                        rg.c.gpu_id.not_in(list(gpu_ids)),
                    )
                )
            conn.execute(
                update(rg)
                .where(rg.c.reservation_id == reservation_id)
                .values(start_at=start, end_at=end, cancelled=cancelled)
            )
            added = [g for g in gpu_ids if g not in old_ids]
            if added:
                conn.execute(
                    insert(rg),
                    [
                        {
                            "reservation_id": reservation_id,
                            "gpu_id": g,
                            "start_at": start,
                            "end_at": end,
                            "cancelled": cancelled,
                        }
                        for g in added
                    ],
                )
            _note_length(conn, start, end)
            return reservation_id

        self._write(work, (), None, None, reservation_id)
        return self.get(reservation_id)

    def set_flags(self, flags: dict[int, str | None]) -> None:
        """Flag reservations (reason) or clear their flag (None)."""
        if not flags:
            return

        def work(conn: Connection) -> None:
            for rid, reason in flags.items():
                conn.execute(
                    update(reservations)
                    .where(reservations.c.id == rid)
                    .values(flagged=reason is not None, flag_reason=reason)
                )

        self.db.write(work)

    def count(self) -> int:
        with self.db.read() as conn:
            return int(conn.execute(select(func.count()).select_from(reservations)).scalar() or 0)

    def _write(
        self,
        work: Callable[[Connection], int],
        gpu_ids: Sequence[int],
        start: datetime | None,
        end: datetime | None,
        exclude: int | None,
    ) -> int:
        try:
            return self.db.write(work)
        except IntegrityError as error:
            if not _is_overlap(error):
                raise
        # Lost a race the pre-check could not see: the database refused; name the winner.
        if start is None or end is None:
            raise Conflict("Another change to these GPUs won the race; reload and try again.")
        with self.db.read() as conn:
            found = self.clashes(conn, gpu_ids, start, end, exclude)
        if found:
            raise clash_error(found)
        raise Conflict("Those GPUs were just booked by someone else; reload and try again.")


def _gpu_order(gpu: Gpu) -> tuple[str, int]:
    return gpu.host, gpu.index


def _note_length(conn: Connection, start: datetime, end: datetime) -> None:
    seconds = int((end - start).total_seconds()) + 1
    conn.execute(
        update(reservation_stats)
        .where(and_(reservation_stats.c.id == 1, reservation_stats.c.longest_seconds < seconds))
        .values(longest_seconds=seconds)
    )
