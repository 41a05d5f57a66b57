"""POST reservations/search through the REST API: answers, booking one, and bad input."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.api.helpers import refused
from tests.conftest import UTC, book, iso, soon


def when(reply: Any, n: int = 0) -> datetime:
    return datetime.fromisoformat(reply.body["slots"][n]["start"])


async def test_earliest_slot_skips_bookings_and_books(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    start = soon(3, days=2)
    for host in ("gpu1", "gpu2", "gpu3"):  # every host has at most 2 GPUs free for 2 hours
        await book(bob, "busy", [f"{host}:0", f"{host}:1"], start, "2h")
    ask = {"count": 3, "duration": "1h", "same_host": True, "not_before": iso(start),
           "limit": 3}  # fmt: skip
    found = await alice("POST", "reservations/search", ask)
    assert found.status == 200, found
    slots = found.body["slots"]
    assert when(found) == start + timedelta(hours=2)  # when the 2-hour bookings end
    assert len(slots) == 3 and {s["hosts"][0] for s in slots} == {"gpu1", "gpu2", "gpu3"}
    assert slots[0]["gpus"] == ["gpu1:0", "gpu1:1", "gpu1:2"]
    # without same_host the 2 free GPUs of each host serve at once, on the fullest hosts
    loose = await alice("POST", "reservations/search", {**ask, "same_host": False})
    assert when(loose) == start
    assert len(loose.body["slots"][0]["gpus"]) == 3
    first = slots[0]
    made = await alice("POST", "reservations", {"title": "found", "gpus": first["gpus"],
                                                "start": first["start"], "end": first["end"]})  # fmt: skip
    assert made.status == 201, made
    again = await alice("POST", "reservations/search", ask)
    assert again.body["slots"][0]["gpus"][0].startswith("gpu2")  # gpu1's block is taken now


async def test_two_wholly_free_hosts_are_both_offered(api: Any) -> None:
    """Issue #28: with gpu3 full and gpu1, gpu2 wholly free, limit 3 gave one answer."""
    alice, start = api("alice"), soon(2, days=2)
    await book(api("bob"), "full", [f"gpu3:{i}" for i in range(4)], start, "2d")
    ask = {"count": 2, "duration": "2h", "not_before": iso(start), "limit": 3}
    found = await alice("POST", "reservations/search", ask)
    assert found.status == 200, found
    slots = found.body["slots"]
    assert [(when(found, n), s["gpus"]) for n, s in enumerate(slots[:2])] == [
        (start, ["gpu1:0", "gpu1:1"]), (start, ["gpu2:0", "gpu2:1"])]  # fmt: skip
    assert len(slots) == 3 and slots[2]["hosts"] == ["gpu3"]  # when gpu3 frees up
    assert when(found, 2) == start + timedelta(days=2)


async def test_limit_six_gives_six_when_six_exist(api: Any) -> None:
    """Issue #28: 'limit': 6 stayed at 3 answers; each host at each start where it frees up."""
    alice, bob, start = api("alice"), api("bob"), soon(4, days=3)
    for n, host in enumerate(("gpu1", "gpu2", "gpu3")):
        await book(bob, "busy", [f"{host}:0"], start, f"{2 * (n + 1)}h")
    ask = {"count": 2, "duration": "2h", "not_before": iso(start), "limit": 6}
    found = await alice("POST", "reservations/search", ask)
    assert found.status == 200, found
    got = [(when(found, n), s["gpus"]) for n, s in enumerate(found.body["slots"])]
    hours = timedelta(hours=1)
    assert got == [
        (start, ["gpu1:1", "gpu1:2"]), (start, ["gpu2:1", "gpu2:2"]),
        (start, ["gpu3:1", "gpu3:2"]), (start + 2 * hours, ["gpu1:0", "gpu1:1"]),
        (start + 4 * hours, ["gpu2:0", "gpu2:1"]), (start + 6 * hours, ["gpu3:0", "gpu3:1"]),
    ]  # fmt: skip
    fewer = await alice("POST", "reservations/search", {**ask, "limit": 3})
    assert fewer.body["slots"] == found.body["slots"][:3]


async def test_model_memory_and_indices(api: Any) -> None:
    alice = api("alice")
    start = soon(5, days=3)
    await book(api("bob"), "busy", ["gpu1:0"], start, "3h")
    found = await alice("POST", "reservations/search", {
        "indices": [0, 1], "duration": "30m", "not_before": iso(start), "host": "gpu1"})  # fmt: skip
    assert found.status == 200, found
    assert found.body["slots"][0]["gpus"] == ["gpu1:0", "gpu1:1"]
    assert when(found) == start + timedelta(hours=3)
    none = await alice("POST", "reservations/search", {
        "count": 1, "duration": "1h", "model": "H100", "not_before": iso(start)})  # fmt: skip
    assert none.status == 200 and none.body["slots"] == []
    big = await alice("POST", "reservations/search", {
        "count": 1, "duration": "1h", "min_memory_mib": 10**6, "not_before": iso(start)})  # fmt: skip
    assert big.body["slots"] == []


async def test_respects_access_rules(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    rule = {"name": "nights", "users": ["alice"], "hosts": ["gpu3"],
            "windows": [{"days": "mon-sun", "start": "22:00", "end": "06:00"}]}  # fmt: skip
    assert (await boss("POST", "rules", rule)).status == 201
    found = await alice("POST", "reservations/search", {"count": 1, "duration": "2h"})
    assert found.status == 200, found
    slot = found.body["slots"][0]
    assert slot["hosts"] == ["gpu3"]
    local = datetime.fromisoformat(slot["start"]).astimezone(UTC)
    made = await alice("POST", "reservations", {"title": "night", "gpus": slot["gpus"],
                                                "start": slot["start"], "end": slot["end"]})  # fmt: skip
    assert made.status == 201, (made, local)
    # carol has no rule at all: nothing is bookable for her
    assert (await api("carol")("POST", "reservations/search",
                               {"count": 1, "duration": "1h"})).body["slots"] == []  # fmt: skip


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"duration": "1h"}, 422, ("count",)),
        ({"count": 0, "duration": "1h"}, 422, ("count",)),
        ({"count": "two", "duration": "1h"}, 400, ("count",)),
        ({"count": 2}, 422, ("duration",)),
        ({"count": 2, "duration": "soon"}, 422, ("duration",)),
        ({"count": 2, "duration": "1m"}, 422, ("duration",)),
        ({"count": 2, "duration": "1h", "nvlink": "yes"}, 400, ("nvlink",)),
        ({"count": 2, "duration": "1h", "deadline": "tomorrow"}, 422, ("deadline",)),
        ({"count": 2, "duration": "1h", "deadline": "2000-01-01T00:00:00Z"}, 422, ("deadline",)),
        ({"count": 2, "duration": "1h", "profile": "1g.10gb", "nvlink": True}, 422, ("nvlink",)),
        ({"count": 3, "duration": "1h", "indices": [0, 1]}, 422, ("indices",)),
        ({"count": 2, "duration": "1h", "indices": [0, 0]}, 422, ("twice",)),
        ({"count": 2, "duration": "1h", "host": "nowhere"}, 422, ("nowhere",)),
        ({"count": 2, "duration": "1h", "limit": 99}, 422, ("limit",)),
        ({"count": 2, "duration": "1h", "colour": "red"}, 400, ("colour",)),
    ],
)
async def test_bad_input(api: Any, body: dict[str, Any], status: int, words: tuple[str]) -> None:
    reply = await api("alice")("POST", "reservations/search", body)
    refused(reply, status, *words)


async def test_not_json_and_anonymous(api: Any) -> None:
    reply = await api("alice")("POST", "reservations/search", raw=b"{nope")
    assert reply.status == 400 and reply.message
    assert (await api(None)("POST", "reservations/search", {"count": 1})).status == 401
