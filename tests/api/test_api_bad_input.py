"""Conflicts and bad input: the right status, a sentence a person understands, nothing changed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.api.helpers import booking, ids, now, refused, snapshot
from tests.conftest import iso, soon


async def test_conflict_on_any_gpu_names_owner_gpu_and_time(api: Any) -> None:
    alice, bob, carol = api("alice"), api("bob"), api("carol")
    t = soon()
    held = await alice(
        "POST", "reservations", booking(["gpu1:0", "gpu1:1"], t, t + timedelta(hours=2), "big run")
    )
    assert held.status == 201, held
    before = await snapshot(alice)

    lost = await bob(
        "POST",
        "reservations",
        booking(["gpu2:0", "gpu1:1"], t + timedelta(hours=1), t + timedelta(hours=3)),
    )
    message = refused(lost, 409, "alice", "gpu1:1", "big run", f"{t:%Y-%m-%d %H:%M}")
    assert f"{t + timedelta(hours=2):%H:%M}" in message
    assert "gpu2:0" not in message  # only the GPU that clashes is named
    assert lost.body["conflicts"] == [
        {
            "reservation": held.body["id"],
            "owner": "alice",
            "title": "big run",
            "gpu": "gpu1:1",
            "start": iso(t),
            "end": iso(t + timedelta(hours=2)),
            "share": 1.0,  # all of the GPU
        }
    ]
    # nothing stored for the loser, not even on the GPU that was free
    assert await snapshot(alice) == before
    assert await ids(bob, user="bob") == []
    assert await ids(bob, gpu="gpu2:0") == []

    both = await carol(
        "POST",
        "reservations",
        booking(["gpu1:0", "gpu1:1", "gpu1:2"], t, t + timedelta(minutes=30)),
    )
    refused(both, 409, "gpu1:0", "gpu1:1")
    assert sorted(c["gpu"] for c in both.body["conflicts"]) == ["gpu1:0", "gpu1:1"]
    assert await snapshot(alice) == before

    # back-to-back on both sides is allowed
    for start, end in (
        (t - timedelta(hours=1), t),
        (t + timedelta(hours=2), t + timedelta(hours=3)),
    ):
        ok = await bob("POST", "reservations", booking(["gpu1:1", "gpu2:0"], start, end))
        assert ok.status == 201, ok


async def test_bad_reservation_input_changes_nothing(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    t = soon()
    mine = await alice("POST", "reservations", booking(["gpu1:0"], t, t + timedelta(hours=1)))
    assert mine.status == 201
    rid = mine.body["id"]
    good = booking(["gpu2:0"], t, t + timedelta(hours=1))
    before = await snapshot(alice)

    async def post(**changes: Any) -> Any:
        body = {**good, **changes}
        return await bob("POST", "reservations", {k: v for k, v in body.items() if v is not None})

    refused(await bob("POST", "reservations", raw=b'{"title": "x", '), 400, "not valid JSON")
    refused(await bob("POST", "reservations", raw=b"\xff\xfe"), 400, "JSON")
    refused(await bob("POST", "reservations", raw=b""), 400, "JSON object")
    refused(await bob("POST", "reservations", [good]), 400, "must be a JSON object")
    refused(await bob("POST", "reservations", "gpu2:0"), 400, "must be a JSON object")
    refused(await post(gpus=["gpu9:0"]), 422, "Unknown GPU", "gpu9:0")
    refused(await post(gpus=["gpu2:0", "gpu1:17"]), 422, "Unknown GPU", "gpu1:17")
    refused(await post(gpus=[]), 422, "gpus", "non-empty")
    refused(await post(gpus=None), 422, "gpus")
    refused(await post(end=iso(t)), 422, "end must be after the start")
    refused(await post(end=iso(t - timedelta(hours=1))), 422, "end must be after the start")
    refused(await post(start="2030-01-07T10:00:00"), 422, "'start'", "no time zone offset")
    refused(
        await post(end=(t + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")), 422, "'end'", "offset"
    )
    refused(
        await post(start="tomorrow at nine"), 422, "'start'", "not a date-time", "tomorrow at nine"
    )
    refused(await post(end=1234567890), 422, "'end'", "ISO 8601")
    refused(await post(end=None, duration="soon"), 422, "'duration'")
    refused(await post(end=None), 422, "'end'", "required")
    refused(await post(duration="1h"), 422, "either 'end' or 'duration'")
    refused(await post(end=iso(t + timedelta(minutes=5))), 422, "at least 10min", "5min")
    refused(await post(end=iso(t + timedelta(days=3, minutes=1))), 422, "at most 3d")
    far = now() + timedelta(days=31)
    refused(await post(start=iso(far), end=iso(far + timedelta(hours=1))), 422, "30d ahead")
    past = now() - timedelta(hours=1)
    refused(await post(start=iso(past), end=iso(past + timedelta(hours=2))), 422, "in the past")
    refused(await post(title="x" * 201), 422, "'title'", "201 characters", "limit is 200")
    refused(await post(title="   "), 422, "'title'", "empty")
    refused(await post(title=None), 422, "'title'", "required")
    refused(await post(title=["a"]), 400, "'title'", "string")
    refused(await post(description="d" * 4001), 422, "'description'", "4000")
    refused(await post(owner="alice"), 403, "admins")
    # absurd numbers are refused, not crashes
    start = iso(t).encode()
    for raw, words in (
        (b'{"title": "x", "gpus": ["gpu2:0"], "start": "%s", "duration": NaN}', ["'duration'"]),
        (b'{"title": "x", "gpus": ["gpu2:0"], "start": "%s", "duration": 1e999}', ["too long"]),
        (b'{"title": "x", "gpus": ["gpu2:0"], "start": "%s", "duration": "9999999999d"}', ["long"]),
    ):
        refused(await bob("POST", "reservations", raw=raw % start), 422, *words)
    refused(await post(start="9999-12-31T23:59:59-01:00"), 422, "'start'", "out of range")
    refused(await post(start="0001-01-01T00:30:00+01:00"), 422, "'start'", "out of range")
    assert await snapshot(alice) == before

    # someone else's reservation
    refused(
        await bob("PATCH", f"reservations/{rid}", {"title": "mine now"}), 403, "belongs to alice"
    )
    refused(await bob("DELETE", f"reservations/{rid}"), 403, "belongs to alice", "cancel")
    # ids that are not numbers, or do not exist
    for method, body in (("GET", None), ("PATCH", {"title": "x"}), ("DELETE", None)):
        refused(await alice(method, "reservations/abc", body), 404, "ids are numbers")
        refused(await alice(method, "reservations/999999", body), 404, "no reservation 999999")
    # edits that make no sense
    refused(
        await alice("PATCH", f"reservations/{rid}", {"owner": "bob"}), 400, "Cannot change owner"
    )
    refused(await alice("PATCH", f"reservations/{rid}", {"title": ""}), 422, "'title'", "empty")
    refused(await alice("PATCH", f"reservations/{rid}", {"gpus": ["gpu7:1"]}), 422, "gpu7:1")
    refused(await alice("PATCH", f"reservations/{rid}", {"end": iso(t)}), 422, "after the start")
    refused(await alice("PATCH", f"reservations/{rid}", raw=b"[1]"), 400, "JSON object")
    refused(await alice("PATCH", f"reservations/{rid}", raw=b"nope"), 400, "not valid JSON")
    assert await snapshot(alice) == before


async def test_cancelled_and_ended_reservations_cannot_be_edited(api: Any) -> None:
    alice = api("alice")
    t = soon()
    upcoming = await alice("POST", "reservations", booking(["gpu3:1"], t, t + timedelta(hours=1)))
    gone = upcoming.body["id"]
    assert (await alice("DELETE", f"reservations/{gone}")).status == 200
    running = await alice(
        "POST",
        "reservations",
        {
            "title": "r",
            "gpus": ["gpu3:2"],
            "start": iso(now() - timedelta(minutes=3)),
            "duration": "1h",
        },
    )
    done = running.body["id"]
    assert (await alice("DELETE", f"reservations/{done}")).body["status"] == "ended"
    before = await snapshot(alice)
    refused(await alice("PATCH", f"reservations/{gone}", {"title": "back"}), 409, "cancelled")
    refused(await alice("DELETE", f"reservations/{gone}"), 409, "already cancelled")
    refused(
        await alice("PATCH", f"reservations/{done}", {"end": iso(now() + timedelta(hours=1))}),
        409,
        "already ended",
    )
    refused(await alice("DELETE", f"reservations/{done}"), 409, "already ended")
    assert await snapshot(alice) == before


async def test_bad_list_and_overview_queries(api: Any) -> None:
    alice = api("alice")
    t = iso(soon())
    refused(await alice("GET", "reservations", params={"start": "yesterday"}), 422, "'start'")
    refused(
        await alice("GET", "reservations", params={"start": t, "end": t}), 422, "after its start"
    )
    refused(await alice("GET", "reservations", params={"host": "gpu9"}), 422, "Unknown host 'gpu9'")
    refused(
        await alice("GET", "reservations", params={"gpu": "gpu1:9"}), 422, "Unknown GPU 'gpu1:9'"
    )
    refused(
        await alice("GET", "reservations", params={"limit": "lots"}), 422, "'limit'", "whole number"
    )
    refused(await alice("GET", "reservations", params={"limit": "0"}), 422, "'limit'")
    refused(
        await alice("GET", "reservations", params={"include_cancelled": "maybe"}),
        422,
        "true or false",
    )
    refused(await alice("GET", "overview", params={"slot": "often"}), 422, "'slot'")
    refused(await alice("GET", "overview", params={"slot": "99999999999999d"}), 422, "'slot'")
    for path in ("reservations", "overview", "rules/coverage"):
        for far in ("9999-12-31T23:00:00Z", "0001-01-01T00:00:00Z"):
            refused(await alice("GET", path, params={"start": far}), 422, "out of range")
    refused(await alice("GET", "overview", params={"start": t, "end": t}), 422, "after")
    refused(await alice("GET", "rules/coverage", params={"start": t, "end": t}), 422, "window")


async def test_bad_rules_change_nothing(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    kept = await boss(
        "POST",
        "rules",
        {
            "name": "office",
            "groups": ["phd"],
            "windows": [{"days": ["mon-fri"], "start": "08:00", "end": "16:00"}],
        },
    )
    assert kept.status == 201, kept
    rule_id = kept.body["id"]
    rules_before = (await boss("GET", "rules")).body
    reservations_before = await snapshot(boss)
    good = {"name": "n", "users": ["*"]}

    # rule endpoints are for admins
    refused(await alice("POST", "rules", good), 403, "Only gpuhive admins", "alice")
    refused(await alice("PUT", f"rules/{rule_id}", good), 403, "admins")
    refused(await alice("DELETE", f"rules/{rule_id}"), 403, "admins")
    # admins with bad rules
    refused(
        await boss(
            "POST", "rules", {**good, "valid_from": "2026-12-10", "valid_until": "2026-12-01"}
        ),
        422,
        "valid_until",
        "before it starts",
    )
    refused(
        await boss("POST", "rules", {**good, "valid_from": "next week"}),
        422,
        "'valid_from'",
        "YYYY-MM-DD",
    )
    bad_windows = [
        ({"days": ["mon"], "start": "25:00", "end": "26:00"}, ["start", "HH:MM", "25:00"]),
        ({"days": ["mon"], "start": "08:00", "end": "8am"}, ["end", "HH:MM"]),
        ({"days": ["funday"], "start": "08:00", "end": "16:00"}, ["Unknown day", "funday"]),
        ({"days": ["mon"], "start": "09:00", "end": "09:00"}, ["both 09:00"]),
    ]
    for window, words in bad_windows:
        refused(await boss("POST", "rules", {**good, "windows": [window]}), 422, *words)
    refused(await boss("POST", "rules", {**good, "hosts": ["gpu9"]}), 422, "unknown host 'gpu9'")
    refused(await boss("POST", "rules", {**good, "gpus": ["gpu1:8"]}), 422, "unknown GPU 'gpu1:8'")
    refused(await boss("POST", "rules", {"name": "nobody"}), 422, "subject")
    refused(await boss("POST", "rules", raw=b"{oops"), 400, "not valid JSON")
    refused(await boss("PUT", f"rules/{rule_id}", {**good, "hosts": ["gpu9"]}), 422, "gpu9")
    refused(await boss("PUT", "rules/4242", good), 404, "no access rule 4242")
    refused(await boss("DELETE", "rules/4242"), 404, "no access rule 4242")
    refused(await boss("GET", "rules/x"), 404, "ids are numbers")
    assert (await boss("GET", "rules")).body == rules_before
    assert await snapshot(boss) == reservations_before
