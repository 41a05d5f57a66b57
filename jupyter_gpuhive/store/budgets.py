"""Budgets stored, and what counts against them, read inside a booking's transaction.

`BudgetReads.lock` serializes the bookings that count against one budget: on PostgreSQL a
transaction-scoped advisory lock per budget (taken in id order, after the booking's GPU
locks and its owner's limit lock, before anything is read), so that two bookings of one
group's members never both pass on what they read; on SQLite every write transaction is
BEGIN IMMEDIATE, so writers take turns anyway.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, tzinfo
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    bindparam,
    delete,
    func,
    insert,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from ..errors import NotFound
from ..model.budgets import Budget, Figures, Period, Standing
from ..model.errand import Errand
from ..model.shares import WHOLE
from .accounting import IDLE
from .database import Database
from .reports import _seconds
from .schema import (
    UTCDateTime,
    budget_warnings,
    budgets,
    gpu_charges_hourly,
    gpus,
    hosts,
    reservation_gpus,
    reservation_stats,
    reservations,
    user_groups,
)

BUDGET_LOCKS = 0x67686275  # the advisory lock space of budgets ('ghbu')
JOULES_PER_KWH = 3.6e6


def _budget(row: Any) -> Budget:
    return Budget(
        scope=row.scope, name=row.name, period=row.period, gpu_hours=row.gpu_hours, kwh=row.kwh,
        carry_over=bool(row.carry_over), overdraft_percent=row.overdraft_percent,
        starts=row.starts, ends=row.ends, warn_at=tuple(json.loads(row.warn_at)),
        kwh_per_gpu_hour=row.kwh_per_gpu_hour, id=row.id, updated_by=row.updated_by,
    )  # fmt: skip


def _values(budget: Budget, by: str, at: datetime) -> dict[str, Any]:
    return {
        "scope": budget.scope, "name": budget.name, "period": budget.period,
        "starts": budget.starts, "ends": budget.ends, "gpu_hours": budget.gpu_hours,
        "kwh": budget.kwh, "carry_over": budget.carry_over,
        "overdraft_percent": budget.overdraft_percent, "warn_at": json.dumps(budget.warn_at),
        "kwh_per_gpu_hour": budget.kwh_per_gpu_hour, "updated_by": by, "updated_at": at,
    }  # fmt: skip


class BudgetStore:
    """Budget rows (admins' changes), their standing, warnings sent, statements."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def all(self) -> list[Budget]:
        with self.db.read() as conn:
            return [_budget(r) for r in conn.execute(select(budgets).order_by(budgets.c.id))]

    def get(self, budget_id: int) -> Budget:
        with self.db.read() as conn:
            row = conn.execute(select(budgets).where(budgets.c.id == budget_id)).first()
        if row is None:
            raise NotFound(f"There is no budget {budget_id}.")
        return _budget(row)

    def add(self, budget: Budget, by: str, at: datetime, errand: Errand | None = None) -> Budget:
        """Store a new budget (`errand`: the API request, its Idempotency-Key taken here)."""

        def work(conn: Connection) -> int:
            done = conn.execute(insert(budgets).values(**_values(budget, by, at)))
            return int(done.inserted_primary_key[0])  # type: ignore[index]

        return replace(budget, id=self.db.write(work, errand=errand), updated_by=by)

    def replace(self, budget_id: int, budget: Budget, by: str, at: datetime) -> Budget:
        def work(conn: Connection) -> None:
            done = conn.execute(
                update(budgets).where(budgets.c.id == budget_id).values(**_values(budget, by, at))
            )
            if not done.rowcount:
                raise NotFound(f"There is no budget {budget_id}.")

        self.db.write(work)
        return replace(budget, id=budget_id, updated_by=by)

    def remove(self, budget_id: int) -> None:
        def work(conn: Connection) -> None:
            conn.execute(delete(budget_warnings).where(budget_warnings.c.budget_id == budget_id))
            if not conn.execute(delete(budgets).where(budgets.c.id == budget_id)).rowcount:
                raise NotFound(f"There is no budget {budget_id}.")

        self.db.write(work)

    def standing(
        self,
        budget: Budget,
        at: datetime,
        now: datetime,
        zone: tzinfo,
        extra: Iterable[str] = (),
    ) -> Standing | None:
        """The budget in the period `at` falls in (None: outside its dates; `extra`: a
        payer the store may not know yet)."""
        with self.db.read() as conn:
            return BudgetReads(conn).standing(budget, at, now, zone, extra=extra)

    def applicable(self, user: str, groups: Iterable[str]) -> list[Budget]:
        """The budgets of `user` and of their groups."""
        with self.db.read() as conn:
            return BudgetReads(conn).applicable(user, groups)

    def warned(
        self, budget_id: int, period_start: datetime, threshold: float, at: datetime
    ) -> bool:
        """Record that a threshold's warning goes out; False when one already went (once)."""
        w = budget_warnings

        def work(conn: Connection) -> bool:
            insert_ = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            done = conn.execute(
                insert_(w)
                .values(
                    budget_id=budget_id, period_start=period_start, threshold=threshold, sent_at=at
                )
                .on_conflict_do_nothing()
            )
            return bool(done.rowcount)

        return self.db.write(work)

    def statement(self, members: Sequence[str], period: Period) -> list[dict[str, Any]]:
        """Who used what on which hosts in `period`: one row per (user, host, kind)."""
        h = gpu_charges_hourly
        query = (
            select(h.c.payer, hosts.c.name, h.c.kind, func.sum(h.c.seconds), func.sum(h.c.energy_j))
            .join(gpus, gpus.c.id == h.c.gpu_id)
            .join(hosts, hosts.c.id == gpus.c.host_id)
            .where(h.c.payer.in_(list(members)), h.c.kind != IDLE)
            .where(h.c.hour >= period.start, h.c.hour < period.end)
            .group_by(h.c.payer, hosts.c.name, h.c.kind)
            .order_by(h.c.payer, hosts.c.name, h.c.kind)
        )
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return [
            {
                "user": p,
                "host": host,
                "kind": kind,
                "gpu_hours": round((s or 0) / 3600, 4),
                "kwh": round((e or 0) / JOULES_PER_KWH, 4),
            }
            for p, host, kind, s, e in rows
        ]

    def members(self, group: str) -> list[str]:
        with self.db.read() as conn:
            return BudgetReads(conn).members(group)


class BudgetReads:
    """The budget reads of one open transaction (a booking's guard, a standing)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def applicable(self, user: str, groups: Iterable[str]) -> list[Budget]:
        rows = self._conn.execute(_APPLICABLE, {"user": user, "groups": sorted(groups)}).all()
        return [_budget(r) for r in rows]

    def lock(self, budget_ids: Iterable[int]) -> None:
        """Serialize the bookings counting against these budgets until the transaction ends."""
        if self._conn.dialect.name == "postgresql":
            for budget_id in sorted(set(budget_ids)):
                self._conn.execute(_LOCK, {"space": BUDGET_LOCKS, "key": budget_id})

    def members(self, group: str) -> list[str]:
        """The users last seen in `group`."""
        return list(self._conn.execute(_MEMBERS, {"group": group}).scalars())

    def whose(self, budget: Budget, extra: Iterable[str]) -> dict[str, Any]:
        """Whose use and bookings count: the user, or the group's members (and `extra`: a
        booking's owner, whom the store may not know yet)."""
        if budget.scope == "user":
            return {"payers": [budget.name]}
        return {"payers": sorted({*self.members(budget.name), *extra})}

    def used(
        self, budget: Budget, start: datetime, end: datetime, extra: Iterable[str] = ()
    ) -> Figures:
        """What the meter charged the budget's payers in [start, end) (idle time aside): the
        user, or the group's members (and `extra`: a booking's owner not stored yet)."""
        statement = _statement(self._conn.dialect.name, "used")
        values = {"start": start, "end": end, **self.whose(budget, extra)}
        seconds, joules = self._conn.execute(statement, values).one()
        return Figures((seconds or 0) / 3600, (joules or 0) / JOULES_PER_KWH)

    def committed(
        self,
        budget: Budget,
        period: Period,
        now: datetime,
        extra: Iterable[str] = (),
        exclude: int | None = None,
    ) -> float:
        """GPU-hours the payers' bookings hold ahead of `now` within `period` (a share counts
        its part; `exclude`: the booking being edited), summed by the database."""
        since = max(now, period.start)
        if since >= period.end:
            return 0.0
        statement = _statement(self._conn.dialect.name, "ahead")
        values = {"since": since, "until": period.end, "exclude": exclude or 0,
                  **self.whose(budget, extra)}  # fmt: skip
        seconds = self._conn.execute(statement, values).scalar()
        return round(float(seconds or 0) / 3600 / WHOLE, 6)  # julianday: ~0.1 ms a row

    def standing(
        self,
        budget: Budget,
        at: datetime,
        now: datetime,
        zone: tzinfo,
        *,
        extra: Iterable[str] = (),
        exclude: int | None = None,
    ) -> Standing | None:
        """The budget in the period `at` falls in: used until now, committed ahead, carried."""
        period = budget.period_at(at, zone)
        if period is None:
            return None
        return self.standing_in(budget, period, now, zone, extra=extra, exclude=exclude)

    def standing_in(
        self,
        budget: Budget,
        period: Period,
        now: datetime,
        zone: tzinfo,
        *,
        extra: Iterable[str] = (),
        exclude: int | None = None,
        bound: bool = False,
    ) -> Standing:
        """The budget in `period`: used until now, committed ahead, carried in. `bound`:
        committed is an upper bound instead (bookings ahead × the longest booking there is),
        cheap to read: what fits under it fits under the exact figure."""
        # used until now and committed ahead, in one statement
        what = "bound" if bound else "standing"
        statement = _statement(self._conn.dialect.name, what)
        since = max(now, period.start)
        values = {"start": period.start, "end": min(period.end, now), "since": since,
                  "until": max(period.end, since), "exclude": exclude or 0,
                  **self.whose(budget, extra)}  # fmt: skip
        seconds, joules, ahead, *longest = self._conn.execute(statement, values).one()
        used = Figures((seconds or 0) / 3600, (joules or 0) / JOULES_PER_KWH)
        if bound:
            span = (values["until"] - values["since"]).total_seconds()
            hours = int(ahead or 0) * min(float(longest[0] or span), span) / 3600
        else:
            hours = round(float(ahead or 0) / 3600 / WHOLE, 6)  # julianday: ~0.1 ms a row
        committed = Figures(hours, hours * budget.kwh_per_gpu_hour)
        carried = Figures()
        before = budget.previous(period, zone) if budget.carry_over else None
        if before is not None and period.start <= now:  # the current period only
            spent = self.used(budget, before.start, before.end, extra)
            carried = Figures(*(
                amount - spent.get(unit) if (amount := budget.amount(unit)) else 0.0
                for unit in ("gpu_hours", "kwh")
            ))  # fmt: skip
        return Standing(budget, period, used, committed, carried)


_bu = budgets
_APPLICABLE = (
    select(_bu)
    .where(
        ((_bu.c.scope == "user") & (_bu.c.name == bindparam("user")))
        | ((_bu.c.scope == "group") & _bu.c.name.in_(bindparam("groups", expanding=True)))
    )
    .order_by(_bu.c.id)
)
_LOCK = text("SELECT pg_advisory_xact_lock(:space, :key)")
_MEMBERS = select(user_groups.c.user_name).where(user_groups.c.group_name == bindparam("group"))
_h, _r, _rg = gpu_charges_hourly, reservations, reservation_gpus


def _paying(column: Any) -> ColumnElement[bool]:
    """`column` names one of the budget's payers (`BudgetReads.whose`)."""
    return column.in_(bindparam("payers", expanding=True))


@functools.cache
def _statement(dialect: str, what: str) -> Select[Any]:
    """The statement of a standing's figure, built once per dialect."""
    if what == "used":
        return select(func.sum(_h.c.seconds), func.sum(_h.c.energy_j)).where(
            _paying(_h.c.payer),
            _h.c.hour >= bindparam("start", type_=UTCDateTime()),
            _h.c.hour < bindparam("end", type_=UTCDateTime()),
            _h.c.kind != IDLE,
        )
    if what == "standing":  # (used seconds, used joules, committed share-seconds)
        used = _statement(dialect, "used").subquery()
        ahead = _statement(dialect, "ahead").subquery()
        return select(*used.c, *ahead.c).select_from(used.join(ahead, true()))
    if what == "bound":  # (used seconds, used joules, bookings ahead, the longest booking)
        used = _statement(dialect, "used").subquery()
        rows = _statement(dialect, "ahead").with_only_columns(func.count()).subquery()
        longest = select(reservation_stats.c.longest_seconds).scalar_subquery()
        return select(*used.c, *rows.c, longest).select_from(used.join(rows, true()))
    larger, smaller = (func.max, func.min) if dialect == "sqlite" else (func.greatest, func.least)
    since, until = bindparam("since", type_=UTCDateTime()), bindparam("until", type_=UTCDateTime())
    held = _seconds(dialect, larger(_rg.c.start_at, since), smaller(_rg.c.end_at, until))
    return (
        select(func.sum(held * _rg.c.share_ppm))
        .select_from(_rg.join(_r, _r.c.id == _rg.c.reservation_id))
        .where(
            _paying(_r.c.owner),
            _r.c.cancelled_at.is_(None),
            _rg.c.cancelled.is_(False),
            _r.c.end_at > since,  # by the index of live reservations by owner and end
            _r.c.start_at < until,
            _r.c.id != bindparam("exclude"),
        )
    )
