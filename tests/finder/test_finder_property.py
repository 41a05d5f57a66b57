"""The finder against a brute-force search, and its answers booked through the real store.

Random inventories (with and without MIG slices, random NVLink/NUMA topology), random bookings
and allowed spans (access rules), random requests: the finder's whole answer list is the one an
enumeration of its documented contract on a 15-minute grid gives (`brute_force_all`), its first
answer the one an exhaustive search finds, and every answer is free and fits the request.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from itertools import combinations
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpuhive.bookings.finder import SlotSearch
from jupyter_gpuhive.bookings.quotas import LimitService
from jupyter_gpuhive.bookings.reservations import Policy, ReservationService
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity, SliceDecl
from jupyter_gpuhive.model.finder import Inputs, Slot, Want, find
from jupyter_gpuhive.model.limits import LimitTable
from jupyter_gpuhive.model.requests import Booking
from jupyter_gpuhive.model.rules import Rule, Window
from jupyter_gpuhive.store import Store
from tests.support.finder_cases import (
    GRID,
    _fits,
    _free,
    brute_force,
    brute_force_all,
    random_case,
)

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def first(want: Want, inputs: Inputs) -> tuple[int, list[int]] | None:
    found = find(want, inputs)
    return (found[0].start, [u.id for u in found[0].units]) if found else None


@settings(max_examples=300, deadline=None)
@given(seed=SEEDS, slices=st.booleans())
def test_first_answer_equals_brute_force(seed: int, slices: bool) -> None:
    want, inputs = random_case(random.Random(seed), slices=slices)
    expected = brute_force(want, inputs)
    assert first(want, inputs) == (
        (expected.start, [u.id for u in expected.units]) if expected else None
    )


def answers(slots: list[Slot]) -> list[tuple[int, list[int], tuple[int, int]]]:
    return [(s.start, [u.id for u in s.units], s.cost) for s in slots]


@settings(max_examples=300, deadline=None)
@given(seed=SEEDS, slices=st.booleans())
def test_every_answer_equals_the_enumerated_contract(seed: int, slices: bool) -> None:
    """Not only the first answer: the alternatives, their order and how many, too."""
    want, inputs = random_case(random.Random(seed), slices=slices)
    assert answers(find(want, inputs)) == answers(brute_force_all(want, inputs))


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS)
def test_every_answer_with_limits_equals_the_enumerated_contract(seed: int) -> None:
    rng = random.Random(seed)
    want, inputs = random_case(rng)
    banned = {want.not_before + GRID * rng.randrange(0, 96) for _ in range(40)}
    inputs.accept = lambda start, _end, _count: start - start % GRID not in banned
    inputs.wake = sorted(b + GRID for b in banned)
    assert answers(find(want, inputs)) == answers(brute_force_all(want, inputs))


def test_two_free_hosts_give_an_answer_each() -> None:
    """The reported case: with two wholly free hosts and room for 3 answers, both hosts are
    offered at the first start (and a split over both hosts is not, it costs more)."""
    from jupyter_gpuhive.model import Gpu

    units = [Gpu(h * 10 + i, f"gpu{h}", i, f"G{h}{i}") for h in (1, 2) for i in range(4)]
    found = find(Want(2, 3600, 0, 86400, limit=3), Inputs(units, {}))
    assert [(s.start, [u.ref for u in s.units]) for s in found] == [
        (0, ["gpu1:0", "gpu1:1"]), (0, ["gpu2:0", "gpu2:1"])]  # fmt: skip
    # one host full at first: its GPUs are offered when they free up, after the free host
    busy = {u.id: [(0, 7200)] for u in units if u.host == "gpu1"}
    found = find(Want(2, 3600, 0, 86400, limit=6), Inputs(units, busy))
    assert [(s.start, s.units[0].host) for s in found] == [(0, "gpu2"), (7200, "gpu1")]


def test_a_split_over_hosts_is_offered_beside_each_host() -> None:
    """A request that may span hosts: the cheapest split, and each host that can hold it."""
    from jupyter_gpuhive.model import Gpu

    units = [Gpu(h * 10 + i, f"h{h}", i, f"G{h}{i}") for h in (1, 2, 3) for i in range(4)]
    busy = {11: [(0, 10**6)], 12: [(0, 10**6)], 13: [(0, 10**6)], 21: [(0, 10**6)]}
    found = find(Want(2, 3600, 0, 86400, limit=5), Inputs(units, busy))
    refs = [[u.ref for u in s.units] for s in found]
    assert refs == [["h1:0", "h2:0"], ["h2:0", "h2:2"], ["h3:0", "h3:1"]]
    assert {s.start for s in found} == {0}


def test_the_same_units_again_after_a_booking_in_between() -> None:
    """Free 0-2h and again from 5h: the same GPU is offered at both starts, not at 1h."""
    from jupyter_gpuhive.model import Gpu

    gpu = Gpu(1, "h", 0, "G")
    found = find(Want(1, 3600, 0, 86400, limit=5), Inputs([gpu], {1: [(7200, 18000)]}))
    assert [s.start for s in found] == [0, 18000]


@settings(max_examples=150, deadline=None)
@given(seed=SEEDS, slices=st.booleans())
def test_every_answer_is_free_and_fits(seed: int, slices: bool) -> None:
    want, inputs = random_case(random.Random(seed), slices=slices)
    found = find(want, inputs)
    assert len(found) <= want.limit
    assert [s.start for s in found] == sorted(s.start for s in found)
    for slot in found:
        assert want.not_before <= slot.start and slot.end <= want.deadline
        assert slot.end - slot.start == want.duration and len(slot.units) == want.count
        assert _fits(slot.units, want, inputs)
        assert all(_free(u, slot.start, slot.end, inputs) for u in slot.units)
    assert len({(s.start, frozenset(u.id for u in s.units)) for s in found}) == len(found)


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS)
def test_limits_predicate_is_obeyed(seed: int) -> None:
    rng = random.Random(seed)
    want, inputs = random_case(rng)
    banned = {want.not_before + GRID * rng.randrange(0, 96) for _ in range(40)}
    inputs.accept = lambda start, _end, _count: start - start % GRID not in banned
    inputs.wake = sorted(b + GRID for b in banned)  # where the answer turns to yes
    expected = brute_force(want, inputs)
    assert first(want, inputs) == (
        (expected.start, [u.id for u in expected.units]) if expected else None
    )


def test_prefers_a_started_host_and_keeps_whole_gpus() -> None:
    """Fragmentation: a 1-GPU request goes to the host already in use; a slice to the GPU
    already split and used, not to a fresh one."""
    from jupyter_gpuhive.model import Gpu

    a = [Gpu(i + 1, "a", i, f"A{i}") for i in range(4)]
    b = [Gpu(i + 11, "b", i, f"B{i}") for i in range(4)]
    s0 = [Gpu(21 + g, "a", 0, f"M{g}", parent_id=1, profile="1g", gpu_instance_id=g + 1)
          for g in range(3)]  # fmt: skip
    s1 = [Gpu(31 + g, "a", 1, f"N{g}", parent_id=2, profile="1g", gpu_instance_id=g + 1)
          for g in range(3)]  # fmt: skip
    busy = {12: [(0, 100)], 13: [(0, 100)], 21: [(0, 100)]}  # b:1, b:2, a:0/mig1 booked
    inputs = Inputs([*a, *b, *s0, *s1], busy)
    one = find(Want(1, 10, 0, 50), inputs)[0]
    assert one.units[0].host == "b"  # b has 2 free GPUs, a has 3 (a:0 is partly booked)
    part = find(Want(1, 10, 0, 50, slices=True), inputs)[0]
    assert part.units[0].parent_id == 1  # a slice of the GPU already split and in use


# --- booked through the store ---------------------------------------------------------------

ZONE = ZoneInfo("Europe/Warsaw")


def _inventory(store: Store, rng: random.Random) -> None:
    hosts = []
    for h in range(2):
        gpus = []
        for i in range(3):
            parts = None
            if rng.random() < 0.5:
                parts = tuple(SliceDecl(gi, 0, "1g.10gb", f"MIG-{h}-{i}-{gi}", 9728)
                              for gi in (1, 2, 3))  # fmt: skip
            gpus.append(GpuDecl(i, f"GPU-{h}-{i}", "A100", 40960, slices=parts))
        hosts.append(HostDecl(f"n{h}", transport="local", gpus=tuple(gpus)))
    store.inventory.sync(hosts)


@pytest.mark.parametrize("seed", range(6))
def test_answers_are_bookable_in_the_store(db_url: str, seed: int) -> None:
    rng = random.Random(seed)
    store = Store(db_url).open()
    try:
        _inventory(store, rng)
        policy = Policy(ZONE, min_length=timedelta(minutes=5), max_length=timedelta(days=3),
                        horizon=timedelta(days=30))  # fmt: skip
        who = Identity("alice")
        limits = LimitService(store, ZONE, LimitTable(), Identity)  # none configured
        service = ReservationService(store, policy, lambda name: Identity(name), limits=limits)
        base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
        units = store.inventory.units()
        for n in range(25):  # random bookings by bob, whatever fits
            unit = rng.choice(units)
            start = base + timedelta(minutes=15 * rng.randrange(0, 96))
            try:
                service.create(Identity("bob"), Booking(f"b{n}", (unit.ref,), start,
                                                        duration=timedelta(hours=rng.randint(1, 6))))  # fmt: skip
            except Exception:
                continue
        if seed % 2:
            store.rules.add(Rule(None, "days", users=frozenset({"alice"}),
                                 windows=(Window(frozenset(range(7)), _t(8), _t(20)),)), "boss")  # fmt: skip
        search = SlotSearch(store, policy, lambda: None)
        for want in (
            Want(2, 3 * 3600, int(base.timestamp()), 0, same_host=True, limit=4),
            Want(3, 2 * 3600, int(base.timestamp()), 0, slices=True, limit=4),
            Want(1, 5 * 3600, int(base.timestamp()), 0, profile="1g.10gb", limit=3),
            Want(2, 3600, int(base.timestamp()), 0, limit=3),
        ):
            _, slots = search.search(who, want)
            for slot in slots:  # each answer books; then it is cancelled for the next
                start = datetime.fromtimestamp(slot.start, UTC)
                made = service.create(who, Booking("found", tuple(u.ref for u in slot.units),
                                                   start, datetime.fromtimestamp(slot.end, UTC)))  # fmt: skip
                service.cancel(who, made.id)
            if want.slices and any(u.is_slice for u in units):
                assert slots, want
        assert not _overlaps(store, base)
    finally:
        store.close()


def _t(hour: int):
    from datetime import time

    return time(hour)


def _overlaps(store: Store, base: datetime) -> list[tuple[int, int]]:
    """Pairs of live reservations on conflicting units at the same time."""
    from jupyter_gpuhive.model import units_conflict

    live = store.reservations.window(base - timedelta(days=1), base + timedelta(days=40))
    out = []
    for r, s in combinations(live, 2):
        same_time = r.start < s.end and s.start < r.end
        if same_time and any(units_conflict(a, b) for a in r.gpus for b in s.gpus):
            out.append((r.id, s.id))
    return out
