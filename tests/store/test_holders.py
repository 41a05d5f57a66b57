"""Each GPU's current and next holder (GET hosts) from the index, against the old brute force:
every live booking of the next 30 days read and walked in order."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.model import GpuDecl, HostDecl, Reservation, SliceDecl, utcnow
from jupyter_gpuhive.store import Changes, Store

HORIZON = timedelta(days=30)


def _decls() -> list[HostDecl]:
    mig = tuple(SliceDecl(gi, 0, "3g.40gb", f"MIG-h0-0-{gi}", 40000) for gi in (1, 2))
    return [
        HostDecl(
            f"h{h}",
            gpus=tuple(
                GpuDecl(i, f"GPU-h{h}-{i}", "A100", 80000, mig if (h, i) == (0, 0) else None)
                for i in range(3)
            ),
        )
        for h in range(2)
    ]


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url).open()
    s.inventory.sync(_decls())
    yield s
    s.close()


def brute_force(store: Store, now: datetime) -> dict[int, tuple[int | None, int | None]]:
    """What GET hosts computed before: every booking of [now, now + 30 days) in order."""
    holder: dict[int, Reservation] = {}
    following: dict[int, Reservation] = {}
    for res in store.reservations.window(now, now + HORIZON):
        for gpu in res.gpus:
            if res.start <= now:
                holder[gpu.id] = res
            elif gpu.id not in following:
                following[gpu.id] = res
    units = set(holder) | set(following)
    return {
        u: (holder[u].id if u in holder else None, following[u].id if u in following else None)
        for u in units
    }


def indexed(store: Store, now: datetime) -> dict[int, tuple[int | None, int | None]]:
    return {
        unit: (cur.id if cur else None, nxt.id if nxt else None)
        for unit, (cur, nxt) in store.holders.at(now, now + HORIZON).items()
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_current_and_next_match_the_brute_force(store: Store, seed: int) -> None:
    rng = random.Random(seed)
    units = store.inventory.units()
    assert any(u.is_slice for u in units)  # MIG slices are bookable units too
    now = utcnow()
    made: list[Reservation] = []
    refused = 0
    for _ in range(260):
        start = now + timedelta(minutes=rng.randint(-4 * 24 * 60, 40 * 24 * 60))
        length = timedelta(minutes=rng.choice([10, 45, 90, 600, 2 * 24 * 60]))
        picked = rng.sample(units, rng.choice([1, 1, 1, 2]))
        try:
            made.append(
                store.reservations.create(
                    "u", "t", "", start, start + length, [u.id for u in picked]
                )
            )
        except Conflict:
            refused += 1
    cancelled = rng.sample(made, len(made) // 4)
    for res in cancelled:  # cancelled ones hold nothing
        store.reservations.modify(res.id, lambda _old: Changes(cancelled_at=utcnow()))
    live = [r for r in made if r not in cancelled]  # the service edits only these
    for res in rng.sample(live, len(live) // 6):  # moved ones hold their new span
        shift = timedelta(hours=rng.randint(-30, 30))
        try:
            store.reservations.modify(
                res.id, lambda old, d=shift: Changes(start=old.start + d, end=old.end + d)
            )
        except Conflict:
            refused += 1
    # Edges: a booking that holds a unit right now, one that ended a minute ago.
    idle = [u for u in units if not brute_force(store, now).get(u.id, (None,))[0]]
    for unit, (low, high) in zip(idle, [(-1, 1), (-2, -1), (-1, 1)], strict=False):
        try:
            store.reservations.create(
                "u", "edge", "", now + timedelta(minutes=low), now + timedelta(minutes=high),
                [unit.id],
            )  # fmt: skip
        except Conflict:
            refused += 1
    assert len(made) > 60  # plenty for both sides to agree on
    current = following = 0
    for probe in (now, now + timedelta(hours=7), now + timedelta(days=3, minutes=13)):
        expected = brute_force(store, probe)
        assert indexed(store, probe) == expected
        current += sum(1 for c, _ in expected.values() if c)
        following += sum(1 for _, n in expected.values() if n)
    assert current and following


def test_no_bookings_no_holders(store: Store) -> None:
    assert store.holders.at(utcnow(), utcnow() + HORIZON) == {}


@pytest.mark.parametrize("seed", [4, 5])
async def test_the_shared_holders_follow_this_processs_writes_and_skip_those_that_change_none(
    store: Store, seed: int
) -> None:
    """GET hosts' shared holders (monitor/holders.py) after each booking, edit or cancel of
    this process equal a fresh read; a write that changes no pair (a booking after a unit's
    next one) is not followed by a read."""
    from jupyter_gpuhive.monitor.holders import HolderCache

    reads: list[datetime] = []
    real = store.holders.at

    def counted(now: datetime, horizon: datetime) -> Any:
        reads.append(now)
        return real(now, horizon)

    store.holders.at = counted  # type: ignore[method-assign]

    async def run(fn: Any, *args: Any) -> Any:
        return fn(*args)

    cache = HolderCache(store, run, ttl=3600)
    rng = random.Random(seed)
    units = [g.id for g in store.inventory.gpus() if not g.is_slice]
    now = utcnow()
    made: list[Reservation] = []
    unchanged = 0
    for _ in range(60):
        before = len(reads)
        kind = rng.random()
        if kind < 0.6 or not made:
            start = now + timedelta(hours=rng.randrange(1, 24 * 20))
            span = timedelta(hours=rng.randrange(1, 6))
            with contextlib.suppress(Conflict):
                made.append(
                    store.reservations.create(
                        "u", "t", "", start, start + span, [rng.choice(units)]
                    )
                )
        elif kind < 0.8:
            gone = made.pop(rng.randrange(len(made)))
            store.reservations.modify(gone.id, lambda old: Changes(cancelled_at=now))
        else:
            moved = made[rng.randrange(len(made))]
            later = moved.start + timedelta(hours=rng.randrange(-3, 4))
            with contextlib.suppress(Conflict):
                store.reservations.modify(
                    moved.id, lambda old, s=later: Changes(start=s, end=s + timedelta(hours=1))
                )
        shared = await cache.get()
        unit = store.inventory.gpu_by_id
        truth = {
            unit(gid).ref: (cur.id if cur else None, nxt.id if nxt else None)
            for gid, (cur, nxt) in real(utcnow(), utcnow() + HORIZON).items()
        }
        assert {
            ref: (cur.id if cur else None, nxt.id if nxt else None)
            for ref, (cur, nxt) in shared.items()
        } == truth
        unchanged += len(reads) == before
    assert unchanged >= 10, unchanged  # most bookings land after a unit's next one
