"""The finder answers "the earliest 20 GiB for 4 h" (#44): through the REST API of a real
server, and the pure share finder against a brute force."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from jupyter_gpuhive.model import Gpu
from jupyter_gpuhive.model.sharefinder import earliest_shares, peak
from jupyter_gpuhive.model.shares import WHOLE
from tests.api.helpers import refused
from tests.api.test_api_shares import SHARED, share_of
from tests.conftest import iso, soon

H = timedelta(hours=1)


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "hosts": SHARED}


async def test_the_earliest_20_gib_for_4_hours(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    # gpu1:0 holds 60 GiB of shares for 6 h, then 20 GiB; gpu1:1..3 are booked whole for 2 h
    t = soon()
    for memory, hours in (("40G", 6), ("20G", 8)):
        made = await bob("POST", "reservations", {**share_of(["gpu1:0"], hours=hours),
                                                  "start": iso(t), "memory": memory})  # fmt: skip
        assert made.status == 201, made
    for ref in ("gpu1:1", "gpu1:2", "gpu1:3"):
        whole = await bob("POST", "reservations",
                          {**share_of([ref], hours=2), "start": iso(t)})  # fmt: skip
        assert whole.status == 201, whole
    ask = {"memory": "20G", "duration": "4h", "not_before": iso(t)}
    found = await alice("POST", "reservations/search", ask)
    assert found.status == 200, found
    first = found.body["slots"][0]
    # 20 GiB still fit beside the 60 GiB on gpu1:0 at once: the fullest GPU that fits
    assert first["gpus"] == ["gpu1:0"] and datetime.fromisoformat(first["start"]) == t
    assert first["share"] == 0.25 and first["share_memory_mib"] == 20480
    # the answer books as it is
    booked = await alice("POST", "reservations", {"title": "nb", "gpus": first["gpus"],
                                                  "start": first["start"], "end": first["end"],
                                                  "share": first["share"]})  # fmt: skip
    assert booked.status == 201, booked
    # now gpu1:0 is full for 4 h: the next 20 GiB is on a whole GPU once it frees up, at 2 h
    again = await alice("POST", "reservations/search", ask)
    starts = {s["gpus"][0]: datetime.fromisoformat(s["start"]) for s in again.body["slots"]}
    assert starts["gpu1:1"] == t + 2 * H and starts["gpu1:0"] == t + 4 * H
    assert again.body["slots"][0]["gpus"] in (["gpu1:1"], ["gpu1:2"], ["gpu1:3"])
    # whole-GPU searches never offer gpu1:0 while shares hold part of it
    whole = await alice(
        "POST",
        "reservations/search",
        {"count": 1, "duration": "1h", "not_before": iso(t), "host": "gpu1"},
    )
    assert all(datetime.fromisoformat(s["start"]) >= t + 2 * H for s in whole.body["slots"]), (
        whole.body
    )


async def test_share_searches_refused_in_words(api: Any) -> None:
    alice = api("alice")
    ask = {"duration": "1h"}
    refused(await alice("POST", "reservations/search", {**ask, "memory": "200G"}), 409,
            "shareable GPUs", "gpu1:0")  # fmt: skip
    refused(await alice("POST", "reservations/search", {**ask, "share": 0.5, "count": 2}), 422,
            "one GPU")  # fmt: skip
    refused(await alice("POST", "reservations/search", {**ask, "share": 0}), 422, "more than 0")
    refused(await alice("POST", "reservations/search", {**ask, "share": 0.5, "memory": "1G"}),
            422, "either")  # fmt: skip
    refused(await alice("POST", "reservations/search", {**ask, "share": 0.5, "slices": True}),
            422, "whole GPU")  # fmt: skip


def _brute(units: list[Gpu], loads: dict[int, list[tuple[int, int, int]]], share: int,
           duration: int, low: int, high: int) -> dict[int, int]:  # fmt: skip
    """Each GPU's earliest start, second by second."""
    out = {}
    for unit in units:
        for t in range(low, high - duration + 1):
            if all(
                share + sum(s for a, b, s in loads.get(unit.id, ()) if a <= x < b) <= WHOLE
                for x in range(t, t + duration)
            ):
                out[unit.id] = t
                break
    return out


def test_the_share_finder_matches_a_brute_force() -> None:
    rng = random.Random(44)
    units = [Gpu(i, "h", i, f"GPU-{i}", shareable=True) for i in range(4)]
    for _ in range(150):
        loads = {
            u.id: [
                (a, a + rng.randint(1, 12), rng.choice([WHOLE // 4, WHOLE // 2, WHOLE, 100_000]))
                for a in (rng.randint(0, 30) for _ in range(rng.randint(0, 5)))
            ]
            for u in units
        }
        share, duration = rng.choice([WHOLE // 4, WHOLE // 2, 300_000]), rng.randint(1, 6)
        found = earliest_shares(units, loads, lambda _u, s=share: s, duration, 0, 40, limit=10)
        assert {s.units[0].id: s.start for s in found} == _brute(units, loads, share, duration,
                                                                 0, 40)  # fmt: skip
        starts = [s.start for s in found]
        assert starts == sorted(starts)
        for slot in found:
            assert peak(loads[slot.units[0].id], slot.start, slot.end) + share <= WHOLE
