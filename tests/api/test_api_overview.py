"""The overview grid: GPU × time slot, free / mine / others."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.api.helpers import booking, refused
from tests.conftest import iso, soon


async def test_overview_states_slots_and_limits(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    t = soon()
    hour = timedelta(hours=1)
    a = await alice("POST", "reservations", booking(["gpu1:0"], t, t + 2 * hour, "alice's"))
    b = await bob("POST", "reservations", booking(["gpu1:0"], t + 2 * hour, t + 3 * hour, "bob's"))
    c = await bob("POST", "reservations", booking(["gpu1:1", "gpu2:0"], t, t + 1.5 * hour))
    assert [r.status for r in (a, b, c)] == [201, 201, 201]
    window = {"start": iso(t), "end": iso(t + 4 * hour), "host": "gpu1"}

    mine = await alice("GET", "overview", params={**window, "slot": "1h"})
    assert mine.status == 200, mine
    grid = mine.body
    assert grid["slots"] == 4
    assert grid["slot_seconds"] == 3600
    assert grid["legend"] == {"f": "free", "m": "mine", "o": "others", "s": "shared, room left"}
    rows = {row["id"]: row for row in grid["gpus"]}
    assert list(rows) == ["gpu1:0", "gpu1:1", "gpu1:2", "gpu1:3"]
    assert rows["gpu1:0"]["states"] == "mmof"
    assert rows["gpu1:0"]["cells"] == [a.body["id"], a.body["id"], b.body["id"], None]
    assert rows["gpu1:1"]["states"] == "ooff"  # a partly used slot counts as used
    assert rows["gpu1:2"]["states"] == "ffff"
    assert grid["reservations"][str(a.body["id"])]["mine"] is True
    assert grid["reservations"][str(b.body["id"])] == {
        "owner": "bob",
        "title": "bob's",
        "start": iso(t + 2 * hour),
        "end": iso(t + 3 * hour),
        "mine": False,
        "tentative": False,  # no approvals configured: nothing waits (docs/how-to/approvals.md)
    }

    theirs = await bob("GET", "overview", params={**window, "slot": "30m"})
    rows = {row["id"]: row for row in theirs.body["gpus"]}
    assert theirs.body["slots"] == 8
    assert theirs.body["slot_seconds"] == 1800
    assert rows["gpu1:0"]["states"] == "oooommff"
    assert rows["gpu1:1"]["states"] == "mmmfffff"

    daily = await bob(
        "GET",
        "overview",
        params={"start": iso(t), "end": iso(t + 48 * hour), "slot": "1d", "gpu": "gpu2:0"},
    )
    assert daily.status == 200, daily
    assert [row["id"] for row in daily.body["gpus"]] == ["gpu2:0"]
    assert daily.body["gpus"][0]["states"] == "mf"

    # cancelled reservations free their slots
    assert (await bob("DELETE", f"reservations/{c.body['id']}")).status == 200
    again = await alice("GET", "overview", params={**window, "slot": "1h"})
    assert {row["id"]: row["states"] for row in again.body["gpus"]}["gpu1:1"] == "ffff"
    assert str(c.body["id"]) not in again.body["reservations"]

    too_many = await alice(
        "GET",
        "overview",
        params={"start": iso(t), "end": iso(t + timedelta(days=30)), "slot": "1m"},
    )
    refused(too_many, 422, "43200 slots", "at most 20000", "larger 'slot'")
    refused(await alice("GET", "overview", params={**window, "slot": "0"}), 422, "'slot'")
    refused(await alice("GET", "overview", params={"host": "gpu7"}), 422, "Unknown host 'gpu7'")
