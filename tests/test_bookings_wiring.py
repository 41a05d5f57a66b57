"""A reservation as one aggregate (issue #42 item 5): it and its lending choice are written
in one transaction; lending stops only through Bookings, with its event; the bookings service
refuses to start without the fair-share limits (unwired, no booking would be checked)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import SQLAlchemyError

from jupyter_gpuhive.bookings.fairshare import FairShare, FairShareSettings
from jupyter_gpuhive.bookings.quotas import LimitService
from jupyter_gpuhive.bookings.reservations import Policy, ReservationService
from jupyter_gpuhive.bookings.service import LENDING_STOPPED, Bookings
from jupyter_gpuhive.errors import HiveError
from jupyter_gpuhive.model import UTC, GpuDecl, HostDecl, Identity, Reservation, utcnow
from jupyter_gpuhive.model.limits import Limits, LimitTable
from jupyter_gpuhive.model.requests import Booking, BookingChange
from jupyter_gpuhive.privacy import Privacy
from jupyter_gpuhive.store import Store

ALICE = Identity("alice")
# A real fault between the reservation's row and its lending row: the database refuses the
# second write (as a full disk or a lost connection would), after the first one went in.
FAULT = (
    "CREATE TRIGGER refuse_lending BEFORE INSERT ON reservation_lending "
    "BEGIN SELECT RAISE(ABORT, 'disk full'); END"
)


async def _run(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


async def _nobody(who: Identity, errand: object = None) -> None:
    """Bookings' `remember`: nothing kept."""


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    made = Store(sqlite_url).open()
    made.inventory.sync([HostDecl("h1", gpus=(GpuDecl(0, "GPU-h1-0"), GpuDecl(1, "GPU-h1-1")))])
    yield made
    made.close()


def _bookings(store: Store, events: list[tuple[str, int, str, str | None]]) -> Bookings:
    limits = LimitService(store, UTC, LimitTable(), Identity)  # none configured

    def changed(kind: str, res: Reservation, by: str, why: str | None) -> None:
        events.append((kind, res.id, by, why))

    return Bookings(store, _run, Policy(UTC), Identity, Privacy(), limits=limits,
                    remember=_nobody, changed=changed)  # fmt: skip


def _booking(**choice: bool) -> Booking:
    start = utcnow() + timedelta(hours=1)
    return Booking("train", ("h1:0",), start, start + timedelta(hours=1), **choice)


def _refuse_lending_rows(sqlite_url: str) -> None:
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute(FAULT)


async def test_a_booking_and_its_lending_choice_are_one_write(
    store: Store, sqlite_url: str
) -> None:
    bookings = _bookings(store, events := [])
    _refuse_lending_rows(sqlite_url)
    with pytest.raises(SQLAlchemyError, match="disk full"):
        await bookings.create(ALICE, _booking(lend=False))
    assert store.reservations.count() == 0  # before: booked, lending as if chosen (lend)
    assert events == []
    made = await bookings.create(ALICE, _booking())  # the defaults need no lending row
    assert store.preemption.lending([made.id]) == {made.id: (True, False)}


async def test_an_edit_and_its_lending_choice_are_one_write(store: Store, sqlite_url: str) -> None:
    bookings = _bookings(store, events := [])
    made = await bookings.create(ALICE, _booking())
    _refuse_lending_rows(sqlite_url)
    with pytest.raises(SQLAlchemyError, match="disk full"):
        await bookings.update(ALICE, made.id, BookingChange(title="renamed", lend=False))
    assert store.reservations.get(made.id).title == "train"  # before: renamed, still lending
    assert [kind for kind, *_ in events] == ["created"]


async def test_an_edit_keeps_the_part_of_the_choice_it_does_not_name(store: Store) -> None:
    bookings = _bookings(store, [])
    made = await bookings.create(ALICE, _booking(lend=False))
    await bookings.update(ALICE, made.id, BookingChange(reclaim_before_start=True))
    assert store.preemption.lending([made.id]) == {made.id: (False, True)}
    await bookings.update(ALICE, made.id, BookingChange(lend=True))
    assert store.preemption.lending([made.id]) == {made.id: (True, True)}


async def test_lending_stops_through_bookings_with_its_event(store: Store) -> None:
    bookings = _bookings(store, events := [])
    made = await bookings.create(ALICE, _booking(reclaim_before_start=True))
    why = "alice took the GPUs of reservation back"
    await bookings.stop_lending(made.id, "alice", why)
    assert store.preemption.lending([made.id]) == {made.id: (False, True)}  # early stays
    assert events[-1] == ("changed", made.id, "alice", f"{LENDING_STOPPED}: {why}")


def test_bookings_without_fair_share_limits_refuse_to_start(store: Store) -> None:
    with pytest.raises(TypeError, match="fair-share limits"):
        Bookings(store, _run, Policy(UTC), Identity, Privacy(), limits=None,  # type: ignore[arg-type]
                 remember=_nobody)  # fmt: skip
    with pytest.raises(TypeError, match="limits"):
        ReservationService(store, Policy(UTC), Identity)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="reflag"):
        FairShare(store, _run, FairShareSettings(), UTC, Identity, Privacy())  # type: ignore[call-arg]


async def test_limits_are_checked_in_each_booking(store: Store) -> None:
    """What the wire is for: a configured limit refuses a booking over it."""
    table = LimitTable(default=Limits(gpus=1))
    limits = LimitService(store, UTC, table, Identity)
    bookings = Bookings(store, _run, Policy(UTC), Identity, Privacy(), limits=limits,
                        remember=_nobody)  # fmt: skip
    start = utcnow().astimezone(UTC) + timedelta(hours=1)
    two = Booking("two", ("h1:0", "h1:1"), start, start + timedelta(hours=1))
    with pytest.raises(HiveError, match=r"(?i)limit"):
        await bookings.create(ALICE, two)
    assert store.reservations.count() == 0
