"""Reservations: a set of GPUs × [start, end); the database refuses overlaps on any GPU."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Subquery,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from ..errors import Conflict, NotFound
from ..model import Reservation, utcnow
from ..model.errand import Errand
from ..model.shares import WHOLE
from .approvals import Decision, answer, ask
from .clashes import Clash, clash_error, find_clashes, is_overlap
from .database import Database
from .inventory import Inventory
from .limits import LimitReads
from .longest import LongestKnown, overlapping
from .preemption import LendingShown, choose_lending, lending_of, lent_to_of
from .reservationrows import COLUMNS, build, build_joined, gpu_order, insert_booking
from .schema import gpus as gpu_table
from .schema import reservation_gpus, reservations

DEVICE_LOCKS = 0x67707568  # 'gpuh': the advisory lock space of physical GPUs (PostgreSQL)


@dataclass(frozen=True)
class Changes:
    """New values for a reservation; None keeps the old one."""

    title: str | None = None
    description: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    gpu_ids: tuple[int, ...] | None = None
    cancelled_at: datetime | None = None
    lend: bool | None = None  # the lending choice, written in the same transaction
    reclaim_before_start: bool | None = None
    share: int | None = None  # millionths of its one GPU (WHOLE: whole GPUs)
    # approvals (migration 0024): wait for one until then, with why; or the answer given
    tentative: tuple[datetime, str] | None = None
    answer: Decision | None = None


@dataclass(frozen=True)
class PendingWrite:
    """What a write is about to store, for a guard to check inside the same transaction."""

    owner: str
    start: datetime
    end: datetime
    gpu_ids: tuple[int, ...]
    old: Reservation | None = None  # the reservation before an edit
    share: int = WHOLE  # millionths of each GPU it holds (a share is of one GPU)


# Called inside the write transaction before the row is written, with that transaction's
# limit reads; raises to refuse it.
Guard = Callable[[LimitReads, PendingWrite], None]


class Reservations:
    """Reservation rows; every write is one transaction that re-checks for clashes."""

    def __init__(self, db: Database, inventory: Inventory) -> None:
        self.db = db
        self.inventory = inventory
        # counts this process's writes: what was read from reservations before is current
        # while it stays the same (other processes' writes excepted)
        self.version = 0
        self.longest = LongestKnown()
        # what this process's last writes changed, by the version they made: a reader that
        # cached something may tell whether a write touched it (monitor/holders.py)
        self.touched: deque[tuple[int, Touch]] = deque(maxlen=TOUCHES_KEPT)
        self._versions = threading.Lock()

    # --- reading -----------------------------------------------------------------

    def get(self, reservation_id: int) -> Reservation:
        """One reservation by id, cancelled ones included."""
        with self.db.read() as conn:
            rows = conn.execute(select(*COLUMNS).where(reservations.c.id == reservation_id)).all()
            if not rows:
                raise NotFound(f"There is no reservation {reservation_id}.")
            return build(conn, rows, self.inventory.gpu_by_id)[0]

    def window(self, start: datetime, end: datetime, **filters: Any) -> list[Reservation]:
        """Reservations overlapping [start, end), ordered by start; `filters` as `overlapping`
        takes them (gpu_ids, owner, include_cancelled, limit)."""
        with self.db.read() as conn:
            return self._joined(conn, overlapping(conn, start, end, **filters))

    def window_shown(
        self, start: datetime, end: datetime, **filters: Any
    ) -> tuple[list[Reservation], LendingShown]:
        """`window`, and what their JSON shows of lending (choices, the jobs their loans
        run), in one read: three statements on one snapshot, not three transactions with a
        bound list of hundreds of ids in two of them."""
        with self.db.read() as conn:
            chosen = overlapping(conn, start, end, **filters)
            found = self._joined(conn, chosen)
            ids = select(chosen.c.id)
            choices, lent = lending_of(conn, ids), lent_to_of(conn, ids)
        return found, (
            {r.id: choices.get(r.id, (True, False)) for r in found},
            {r.id: lent.get(r.id, []) for r in found},
        )

    def _joined(self, conn: Connection, chosen: Subquery) -> list[Reservation]:
        """The chosen reservations joined with their GPUs, in one statement (a bound IN list
        of thousands of ids cost more than the query itself)."""
        joined = (
            select(*COLUMNS, reservation_gpus.c.gpu_id, reservation_gpus.c.share_ppm)
            .join(reservation_gpus, reservation_gpus.c.reservation_id == reservations.c.id)
            .where(reservations.c.id.in_(select(chosen.c.id)))
            .order_by(reservations.c.start_at, reservations.c.id)
        )
        return build_joined(conn.execute(joined).all(), self.inventory.gpu_by_id)

    def booked_units(self, start: datetime, end: datetime) -> list[tuple[str, datetime, datetime]]:
        """(unit UUID, start, end) of every live booking overlapping [start, end), in one light
        query: a MIG slice's booking also keeps its whole GPU off, and a whole GPU's booking
        each of its slices (model.units_conflict)."""
        rg = reservation_gpus
        query = select(
            gpu_table.c.uuid, rg.c.start_at, rg.c.end_at, rg.c.gpu_id, rg.c.device_id
        ).where(
            rg.c.gpu_id == gpu_table.c.id,
            rg.c.cancelled.is_(False),
            rg.c.start_at < end,
            rg.c.end_at > start,
        )
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        inventory = self.inventory
        split = {part.device_id for part in inventory.units() if part.is_slice}
        out = []
        for uuid, low, high, gpu_id, device_id in rows:
            out.append((uuid, low, high))
            if device_id in split:
                unit = inventory.gpu_by_id(gpu_id)
                if unit.is_slice:  # its parent GPU
                    out.append((inventory.gpu_by_id(unit.device_id).uuid, low, high))
                else:  # its slices
                    out += [(part.uuid, low, high) for part in inventory.slices_of(unit)]
        return out

    def clashes(
        self,
        conn: Connection,
        gpu_ids: Sequence[int],
        start: datetime,
        end: datetime,
        exclude: int | None = None,
        share: int = WHOLE,
    ) -> list[Clash]:
        """Live reservations in the way of holding `share` of `gpu_ids` over [start, end)."""
        return find_clashes(conn, self.inventory.gpu_by_id, gpu_ids, start, end, exclude, share)

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
        lending: tuple[bool, bool] = (True, False),
        errand: Errand | None = None,
        share: int = WHOLE,
        tentative: tuple[datetime, str] | None = None,
    ) -> Reservation:
        """Insert a reservation and its lending choice (lend, reclaim_before_start) in one
        transaction, or raise Conflict naming the reservations in the way (`errand`: the
        API request it is part of; its Idempotency-Key is taken in this transaction).
        `share`: the millionths of its one GPU it holds (WHOLE: all of each GPU);
        `tentative`: it waits for approval until then, for that reason."""
        created = utcnow()

        def work(conn: Connection) -> int:
            self._lock_devices(conn, gpu_ids)
            if guard is not None:
                guard(
                    LimitReads(conn),
                    PendingWrite(owner, start, end, tuple(gpu_ids), share=share),
                )
            found = self.clashes(conn, gpu_ids, start, end, share=share)
            if found:
                raise clash_error(found)
            row = {
                "owner": owner,
                "title": title,
                "description": description,
                "start_at": start,
                "end_at": end,
                "created_at": created,
                "flagged": False,
                "tentative_until": tentative[0] if tentative else None,
            }
            units = [(gid, self.inventory.gpu_by_id(gid).device_id) for gid in gpu_ids]
            rid = insert_booking(conn, row, units, share)
            if tentative is not None:
                ask(conn, rid, tentative[1], created)
            if lending != (True, False):  # the defaults need no row
                choose_lending(conn, rid, *lending)
            self.longest.note(conn, start, end)
            return rid

        rid = self._write(
            work,
            gpu_ids,
            start,
            end,
            None,
            lambda rid: [Touch(rid, tuple(gpu_ids), start, end)],
            errand,
            share,
        )
        self.longest.stored(start, end)
        gpus = tuple(sorted((self.inventory.gpu_by_id(g) for g in gpu_ids), key=gpu_order))
        return Reservation(
            rid, owner, title, description, start, end, gpus, created, share_ppm=share,
            tentative_until=tentative[0] if tentative else None,
        )  # fmt: skip

    def modify(
        self,
        reservation_id: int,
        decide: Callable[[Reservation], Changes],
        guard: Guard | None = None,
        errand: Errand | None = None,
    ) -> Reservation:
        """Apply the changes `decide` returns for the current row, atomically (`errand`: the
        API request it is part of)."""
        spans: list[Touch] = []  # what the committed attempt changed: before, after
        shares = [WHOLE]  # the share it holds after the edit

        def work(conn: Connection) -> int:
            rows = conn.execute(
                select(*COLUMNS).where(reservations.c.id == reservation_id).with_for_update()
            ).all()
            if not rows:
                raise NotFound(f"There is no reservation {reservation_id}.")
            old = build(conn, rows, self.inventory.gpu_by_id)[0]
            change = decide(old)
            start, end = change.start or old.start, change.end or old.end
            gpu_ids = change.gpu_ids or tuple(g.id for g in old.gpus)
            share = old.share_ppm if change.share is None else change.share
            cancelled = change.cancelled_at is not None
            if not cancelled:
                self._lock_devices(conn, [*gpu_ids, *(g.id for g in old.gpus)])
                if guard is not None:
                    pending = PendingWrite(old.owner, start, end, tuple(gpu_ids), old, share)
                    guard(LimitReads(conn), pending)
                found = self.clashes(conn, gpu_ids, start, end, exclude=reservation_id, share=share)
                if found:
                    raise clash_error(found)
            spans[:] = (  # before the writes: a refusal names what is in the way of `after`
                Touch(reservation_id, tuple(g.id for g in old.gpus), old.start, old.end),
                Touch(reservation_id, tuple(gpu_ids), start, end),
            )
            shares[:] = [share]
            values: dict[str, Any] = {"start_at": start, "end_at": end}
            if change.title is not None:
                values["title"] = change.title
            if change.description is not None:
                values["description"] = change.description
            if cancelled:
                values["cancelled_at"] = change.cancelled_at
            if change.tentative is not None:
                values["tentative_until"] = change.tentative[0]
                ask(conn, reservation_id, change.tentative[1], utcnow())
            if change.answer is not None:
                values["tentative_until"] = None
                answer(conn, reservation_id, change.answer)
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
                .values(start_at=start, end_at=end, cancelled=cancelled, share_ppm=share)
            )
            added = [g for g in gpu_ids if g not in old_ids]
            if added:
                conn.execute(
                    insert(rg),
                    [
                        {
                            "reservation_id": reservation_id,
                            "gpu_id": g,
                            "device_id": self.inventory.gpu_by_id(g).device_id,
                            "start_at": start,
                            "end_at": end,
                            "cancelled": cancelled,
                            "share_ppm": share,
                        }
                        for g in added
                    ],
                )
            if change.lend is not None or change.reclaim_before_start is not None:
                choose_lending(conn, reservation_id, change.lend, change.reclaim_before_start)
            self.longest.note(conn, start, end)
            return reservation_id

        try:
            self._write(work, (), None, None, reservation_id, lambda _: spans, errand)
        except Conflict:
            if not spans:
                raise
            # the database refused the edit's new span or share: name what is in the way
            after = spans[1]
            with self.db.read() as conn:
                found = self.clashes(
                    conn, after.gpu_ids, after.start, after.end, reservation_id, shares[0]
                )
            if found:
                raise clash_error(found) from None
            raise
        self.longest.stored(spans[1].start, spans[1].end)
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
        self._bump()

    def _bump(self) -> None:
        with self._versions:  # writes end in several threads: none may be lost
            self.version += 1

    def _lock_devices(self, conn: Connection, gpu_ids: Iterable[int]) -> None:
        """PostgreSQL: take the physical GPUs' transaction locks, in order, before writing.

        Bookings of one GPU then queue instead of deadlocking in the exclusion constraint (a
        whole GPU's row and its slices' rows, written in different orders by two transactions,
        each wait for the other). The constraint still decides; SQLite serializes every write.
        """
        if self.db.dialect != "postgresql":
            return
        devices = sorted({self.inventory.gpu_by_id(g).device_id for g in gpu_ids})
        for device in devices:
            conn.execute(select(func.pg_advisory_xact_lock(DEVICE_LOCKS, device)))

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
        touched: Callable[[int], list[Touch]] | None = None,
        errand: Errand | None = None,
        share: int = WHOLE,
    ) -> int:
        try:
            rid = self.db.write(work, errand=errand)
            if touched is not None:  # recorded before the version that says it changed
                for touch in touched(rid):
                    self.touched.append((self.version + 1, touch))
            return rid
        except IntegrityError as error:
            if not is_overlap(error):
                raise
        finally:
            self._bump()
        # Lost a race the pre-check could not see: the database refused; name the winner.
        if start is None or end is None:
            raise Conflict("Another change to these GPUs won the race; reload and try again.")
        with self.db.read() as conn:
            found = self.clashes(conn, gpu_ids, start, end, exclude, share)
        if found:
            raise clash_error(found)
        raise Conflict("Those GPUs were just booked by someone else; reload and try again.")


TOUCHES_KEPT = 1024  # writes remembered in `Reservations.touched`


@dataclass(frozen=True)
class Touch:
    """A span of units a write of this process changed: a booking's, or an edited or
    cancelled one's before and after."""

    reservation_id: int
    gpu_ids: tuple[int, ...]
    start: datetime
    end: datetime
