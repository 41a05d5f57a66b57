"""Limits through the REST API: the race of one user's 50 bookings (SQLite and PostgreSQL),
growing edits, precedence, admins, lowered limits that flag, tiers, and bad input."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.api.helpers import booking, refused
from tests.conftest import Call, book, iso, soon

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
H = timedelta(hours=1)
GPUS = [f"gpu{h}:{i}" for h in (1, 2, 3) for i in range(4)]

# Per slot start: the GPUs booked by alice that are not cancelled, and their span.
LIVE_ROWS = text(
    """
    SELECT rg.gpu_id, rg.start_at, rg.end_at FROM reservation_gpus rg
    JOIN reservations r ON r.id = rg.reservation_id
    WHERE r.owner = 'alice' AND NOT rg.cancelled
    """
)


async def set_limits(call: Call, scope: str, name: str | None, **limits: Any) -> dict[str, Any]:
    reply = await call("PUT", "limits", {"scope": scope, "name": name, "limits": limits})
    assert reply.status == 200, reply
    return reply.body  # type: ignore[no-any-return]


def stored_rows(db_url: str) -> list[tuple[Any, ...]]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(LIVE_ROWS).all()]
    finally:
        engine.dispose()


def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def most_at_once(rows: list[tuple[Any, ...]]) -> int:
    events = sorted(
        [(_instant(a), 1) for _, a, _ in rows] + [(_instant(b), -1) for _, _, b in rows],
        key=lambda e: (e[0], e[1]),
    )
    count = best = 0
    for _, delta in events:
        count += delta
        best = max(best, count)
    return best


@pytest.mark.parametrize(
    ("limit", "value", "words"),
    [("gpu_hours_week", 10, "GPU-hours"), ("gpus", 3, "at once")],
)
async def test_fifty_bookings_of_one_user_never_end_above_the_limit(
    api: Any, db_url: str, limit: str, value: int, words: str
) -> None:
    await set_limits(api("boss"), "user", "alice", **{limit: value})
    start = soon(hours=3)
    # 50 one-hour bookings on distinct (GPU, slot) pairs: none clashes with another, so only
    # the limit can refuse them; the 12 of each slot overlap each other.
    bodies = [
        booking([GPUS[i % 12]], start + (i // 12) * 2 * H, start + (i // 12) * 2 * H + H, f"r{i}")
        for i in range(50)
    ]
    alice = api("alice")
    replies = await asyncio.gather(*(alice("POST", "reservations", b) for b in bodies))

    won = [r for r in replies if r.status == 201]
    lost = [r for r in replies if r.status != 201]
    assert won and lost
    for reply in lost:
        refused(reply, 409, words)
        assert reply.body["limit"] == limit, reply
    rows = stored_rows(db_url)
    assert len(rows) == len(won)
    if limit == "gpu_hours_week":
        assert len(won) == value  # all within one week: exactly the limit fits
    else:
        assert most_at_once(rows) == value
        assert len(won) == value * 4 + 2  # 3 per full slot of 12, 2 in the last slot of 2


@sqlite_only
async def test_edits_that_grow_past_a_limit_are_refused(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    await set_limits(boss, "user", "alice", gpu_hours_week=4, gpus=2, horizon="10d")
    t = soon(hours=2)
    made = await book(alice, "small", ["gpu1:0"], t, "2h")
    rid = made.body["id"]
    path = f"reservations/{rid}"

    longer = await alice("PATCH", path, {"end": iso(t + 5 * H)})
    assert refused(longer, 409, "GPU-hours") and longer.body["limit"] == "gpu_hours_week"
    wider = await alice("PATCH", path, {"gpus": ["gpu1:0", "gpu1:1", "gpu1:2"]})
    refused(wider, 409, "at once")
    moved = await alice("PATCH", path, {"start": iso(t + timedelta(days=12)), "duration": "2h"})
    assert refused(moved, 422, "ahead").startswith("Reservations may start at most 10d ahead")
    fits = await alice("PATCH", path, {"end": iso(t + 4 * H)})
    assert fits.status == 200, fits
    # lowered below what she holds: shrinking and renaming still work, growing does not
    await set_limits(boss, "user", "alice", gpu_hours_week=1)
    assert (await alice("PATCH", path, {"title": "renamed"})).status == 200
    assert (await alice("PATCH", path, {"end": iso(t + 3 * H)})).status == 200
    refused(await alice("PATCH", path, {"end": iso(t + 3 * H + 30 * timedelta(minutes=1))}), 409)
    # an admin may grow it anyway
    assert (await boss("PATCH", path, {"end": iso(t + 6 * H)})).status == 200


@sqlite_only
async def test_precedence_admins_and_what_get_limits_says(api: Any) -> None:
    boss = api("boss")
    await set_limits(boss, "default", None, gpus=1, upcoming=5)
    await set_limits(boss, "group", "phd", gpus=2)
    await set_limits(boss, "user", "bob", gpus=3)
    mine = (await api("alice")("GET", "limits")).body
    assert "table" not in mine
    assert mine["mine"]["limits"]["gpus"] == 2
    assert mine["mine"]["sources"]["gpus"] == "the limit of group phd"
    assert mine["mine"]["sources"]["upcoming"] == "the site default"
    assert (await api("bob")("GET", "limits")).body["mine"]["limits"]["gpus"] == 3
    assert (await api("carol")("GET", "limits")).body["mine"]["limits"]["gpus"] == 1
    everything = (await boss("GET", "limits")).body
    assert everything["table"]["users"]["bob"]["gpus"] == 3
    assert everything["table"]["default"]["upcoming"] == 5

    t = soon(hours=5)
    carol = api("carol")
    await book(carol, "one", ["gpu2:0"], t)
    refused(await carol("POST", "reservations", booking(["gpu2:1"], t, t + H)), 409, "at once")
    mine = (await carol("GET", "limits")).body["mine"]
    assert mine["current"]["upcoming"] == 1 and mine["current"]["gpu_hours_week"] == 1
    # admins may exceed limits, for themselves and when they book for someone else
    assert (await boss("POST", "reservations", booking(GPUS[0:4], t, t + H))).status == 201
    over = {**booking(["gpu3:0"], t, t + H), "owner": "carol"}
    assert (await boss("POST", "reservations", over)).status == 201


@sqlite_only
async def test_a_lowered_limit_flags_and_never_deletes(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    t = soon(hours=8)
    ids = [
        (await book(alice, f"run {i}", ["gpu3:1", "gpu3:2"], t + i * 2 * H)).body["id"]
        for i in range(3)
    ]
    changed = await set_limits(boss, "user", "alice", gpu_hours_week=4)
    assert list(changed["flag_changes"]) == [str(ids[2])]
    assert "GPU-hours" in changed["flag_changes"][str(ids[2])]
    listed = {r["id"]: r for r in (await alice("GET", "reservations")).body["reservations"]}
    assert set(ids) <= set(listed)  # nothing deleted
    assert listed[ids[2]]["flagged"] and listed[ids[2]]["status"] == "upcoming"
    assert not listed[ids[0]]["flagged"] and not listed[ids[1]]["flagged"]
    cleared = await boss("DELETE", "limits", params={"scope": "user", "name": "alice"})
    assert cleared.status == 200 and cleared.body["flag_changes"] == {str(ids[2]): None}


@sqlite_only
async def test_tiers_halve_the_limit_of_an_inefficient_user(api: Any, jp_serverapp: Any) -> None:
    hive = jp_serverapp.web_app.settings["gpuhive"]
    gpu = hive.store.inventory.gpu("gpu2:3")
    past = soon(hours=0, days=-3)
    await hive.run(hive.store.reservations.create, "bob", "unused", "", past, past + 10 * H,
                   [gpu.id])  # fmt: skip
    boss, bob = api("boss"), api("bob")
    await set_limits(boss, "user", "bob", gpu_hours_week=20)
    tiers = await boss("PUT", "limits/tiers", {"tiers": [{"efficiency_below": 30, "factor": 0.5}]})
    assert tiers.status == 200, tiers
    mine = (await bob("GET", "limits")).body["mine"]
    assert mine["limits"]["gpu_hours_week"] == 10
    assert "efficiency over the last 30d is 0 %, below 30 %" in mine["notes"]["gpu_hours_week"]
    t = soon(hours=1)
    reply = await bob("POST", "reservations", booking(["gpu2:2"], t, t + 2 * H))
    assert "below 30 %" in refused(reply, 409, "GPU-hours")  # 10 held + 2 > 10
    scores = (await bob("GET", "usage/scores")).body["scores"]
    assert scores[0]["user"] == "bob" and scores[0]["efficiency"] == 0
    assert scores[0]["reserved_gpu_hours"] == 10 and scores[0]["idle_reserved_gpu_hours"] == 10


@sqlite_only
async def test_bad_limit_requests_are_refused_in_words(api: Any) -> None:
    boss = api("boss")
    body = {"scope": "user", "name": "alice", "limits": {"gpus": 1}}
    refused(await api("alice")("PUT", "limits", body), 403, "admins")
    refused(await boss("PUT", "limits", {**body, "scope": "team"}), 422, "scope")
    refused(await boss("PUT", "limits", {**body, "name": None}), 422, "name")
    refused(await boss("PUT", "limits", {**body, "limits": {"gpu": 1}}), 400, "gpu")
    refused(await boss("PUT", "limits", {**body, "limits": {"gpus": -1}}), 422, "gpus")
    refused(await boss("PUT", "limits", {**body, "limits": {"gpus": "two"}}), 400, "gpus")
    refused(await boss("PUT", "limits", {**body, "limits": {"longest": "soon"}}), 422, "longest")
    refused(await boss("DELETE", "limits", params={"scope": "user", "name": "zed"}), 404, "zed")
    tier = {"efficiency_below": 130}
    refused(await boss("PUT", "limits/tiers", {"tiers": [tier]}), 422, "efficiency_below")
    refused(await boss("PUT", "limits/tiers", {"tiers": [{"efficiency_below": 20,
                                                          "limit": "horizon"}]}), 422, "limit")  # fmt: skip
    refused(await api("bob")("GET", "usage/scores", params={"user": "alice"}), 403, "alice")
    refused(await boss("GET", "usage/scores", params={"days": "0"}), 422, "days")
