"""MIG slices in the store: inventory, the conflict rule, and the database's own refusal."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import bindparam, text
from sqlalchemy.exc import IntegrityError

from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.jobs.queue_inputs import booked
from jupyter_gpuhive.model import UTC, Gpu, SliceDecl, units_conflict
from jupyter_gpuhive.store import Changes, Store
from jupyter_gpuhive.store.schema import UTCDateTime
from tests.mig.helpers import SLICES, mig_host, unit

BASE = datetime(2030, 2, 4, 10, tzinfo=UTC)  # far ahead: the store itself has no horizon
HOUR = timedelta(hours=1)


def book(store: Store, refs: list[str], start: datetime = BASE, hours: int = 2) -> int:
    ids = [unit(store, r).id for r in refs]
    return store.reservations.create("alice", "t", "", start, start + hours * HOUR, ids).id


def test_the_inventory_lists_slices_under_their_gpu(store: Store) -> None:
    host = store.inventory.host("mig1")
    assert host is not None
    assert [g.ref for g in host.gpus] == ["mig1:0", "mig1:1"]
    assert [u.ref for u in host.units()] == [
        "mig1:0", "mig1:0/mig1", "mig1:0/mig5", "mig1:0/mig13", "mig1:1",
    ]  # fmt: skip
    small = unit(store, "mig1:0/mig13")
    assert (small.profile, small.memory_mib, small.uuid) == ("1g.10gb", 9728, SLICES[2].uuid)
    assert small.parent_id == host.gpus[0].id and small.device_id == host.gpus[0].id
    assert unit(store, SLICES[2].uuid) == small  # by MIG UUID
    assert unit(store, "mig1:0/mig13.0") == small  # with the compute instance
    assert store.inventory.gpu("mig1:1/mig1") is None
    assert store.inventory.slices_of(host.gpus[1]) == []
    assert small.to_json()["parent"] == "mig1:0" and small.to_json()["kind"] == "slice"


def test_the_conflict_rule(store: Store) -> None:
    whole, other = unit(store, "mig1:0"), unit(store, "mig1:1")
    a, b = unit(store, "mig1:0/mig1"), unit(store, "mig1:0/mig5")
    assert units_conflict(whole, a) and units_conflict(a, whole) and units_conflict(a, a)
    assert units_conflict(whole, whole)
    assert not units_conflict(a, b) and not units_conflict(other, a)


def test_a_whole_gpu_and_its_slices_exclude_each_other(store: Store) -> None:
    first = book(store, ["mig1:0/mig1"])
    book(store, ["mig1:0/mig5", "mig1:0/mig13"])  # neighbours: fine
    with pytest.raises(Conflict) as caught:
        book(store, ["mig1:0"], BASE + HOUR)
    assert caught.value.details["conflicts"][0]["reservation"] == first
    assert "mig1:0/mig1 is reserved by alice" in str(caught.value)
    with pytest.raises(Conflict):
        book(store, ["mig1:0/mig1"], BASE + HOUR)
    later = book(store, ["mig1:0", "mig1:1"], BASE + 2 * HOUR)  # back to back: fine
    with pytest.raises(Conflict) as caught:
        book(store, ["mig1:0/mig13"], BASE + 3 * HOUR)
    assert caught.value.details["conflicts"][0]["reservation"] == later


def test_moving_a_reservation_onto_a_busy_unit_is_refused(store: Store) -> None:
    book(store, ["mig1:0"])
    moved = book(store, ["mig1:0/mig1"], BASE + 4 * HOUR)
    with pytest.raises(Conflict):
        store.reservations.modify(moved, lambda old: Changes(start=BASE, end=BASE + HOUR))


_RESERVATION = text(
    "INSERT INTO reservations (owner, title, description, start_at, end_at, created_at, flagged) "
    "VALUES ('mallory', 'sneaky', '', :s, :e, :s, false)"
).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))
_ROW = text(
    "INSERT INTO reservation_gpus (reservation_id, gpu_id, device_id, start_at, end_at, cancelled)"
    " VALUES (:r, :g, :d, :s, :e, false)"
).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))


def raw(store: Store, gpu: Gpu, device: int | None = None) -> None:
    """Write a reservation row with plain SQL, bypassing every check of the application."""
    with store.db.writer.begin() as conn:
        conn.execute(_RESERVATION, {"s": BASE, "e": BASE + HOUR})
        rid = conn.execute(text("SELECT max(id) FROM reservations")).scalar_one()
        row = {"r": rid, "g": gpu.id, "d": gpu.device_id if device is None else device}
        conn.execute(_ROW, {**row, "s": BASE, "e": BASE + HOUR})


@pytest.mark.parametrize(
    ("first", "second"), [("mig1:0", "mig1:0/mig5"), ("mig1:0/mig5", "mig1:0")]
)
def test_the_database_itself_refuses_both_directions(store: Store, first: str, second: str) -> None:
    raw(store, unit(store, first))
    with pytest.raises(IntegrityError):
        raw(store, unit(store, second))
    raw(store, unit(store, "mig1:1"))


def test_the_database_refuses_rows_with_a_wrong_device(store: Store) -> None:
    raw(store, unit(store, "mig1:0"))
    with pytest.raises(IntegrityError):  # a slice claiming to be on GPU 1 would dodge the rule
        raw(store, unit(store, "mig1:0/mig5"), device=unit(store, "mig1:1").id)


def test_a_repartition_removes_and_adds_slices(store: Store) -> None:
    kept = unit(store, "mig1:0/mig1")
    gone = store.inventory.record_discoveries({"mig1": mig_host(slices=SLICES[:1]).gpus})
    assert [g.ref for g in gone] == ["mig1:0/mig5", "mig1:0/mig13"]
    assert store.inventory.gpu("mig1:0/mig5") is None
    old = store.inventory.gpu_by_id(gone[0].id)
    assert store.inventory.removed(old) and old.ref == "mig1:0/mig5"
    assert unit(store, "mig1:0/mig1") == kept
    # Re-created with a new MIG UUID: the same slice again, under its old ref.
    again = SliceDecl(5, 0, "2g.20gb", "MIG-new-2g", 19968)
    found = mig_host(slices=(SLICES[0], again)).gpus
    assert store.inventory.record_discoveries({"mig1": found}) == []
    back = unit(store, "mig1:0/mig5")
    assert back.id == gone[0].id and back.uuid == "MIG-new-2g"
    assert not store.inventory.removed(back)


def test_the_queue_sees_a_slice_booking_on_its_gpu_and_the_reverse(store: Store) -> None:
    book(store, ["mig1:0/mig5"])
    book(store, ["mig1:1"])
    claims = {(uuid, low) for uuid, low, _ in booked(store, BASE, BASE + HOUR)}
    gpu0 = unit(store, "mig1:0").uuid
    assert claims == {(SLICES[1].uuid, BASE), (gpu0, BASE), (unit(store, "mig1:1").uuid, BASE)}
    later = BASE + 5 * HOUR
    book(store, ["mig1:0"], later)
    claims = {uuid for uuid, _, _ in booked(store, later, later + HOUR)}
    assert claims == {gpu0, *(s.uuid for s in SLICES)}
