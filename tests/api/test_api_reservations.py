"""Reservations through the REST API of a real server, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from tests.api.helpers import booking, ids, now, refused, snapshot
from tests.conftest import TOKENS, iso, soon


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def test_create_get_and_list(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    t = soon()
    made = await alice(
        "POST",
        "reservations",
        {
            **booking(["gpu1:1", "gpu1:0"], t, t + timedelta(hours=2), "train"),
            "description": "rn50",
        },
    )
    assert made.status == 201, made
    first = made.body
    assert first["owner"] == "alice"
    assert first["title"] == "train"
    assert first["description"] == "rn50"
    assert first["gpus"] == ["gpu1:0", "gpu1:1"]
    assert len(first["gpu_uuids"]) == 2
    assert at(first["start"]) == t
    assert at(first["end"]) == t + timedelta(hours=2)
    assert first["status"] == "upcoming"
    assert first["cancelled_at"] is None
    assert first["flagged"] is False
    assert isinstance(first["id"], int)

    # start + duration
    second = await bob(
        "POST",
        "reservations",
        {
            "title": "eval",
            "gpus": ["gpu2:0"],
            "start": iso(t + timedelta(hours=1)),
            "duration": "90m",
        },
    )
    assert second.status == 201, second
    assert at(second.body["end"]) == t + timedelta(hours=2, minutes=30)
    assert second.body["owner"] == "bob"

    # no start: it starts now, and is running
    before = now()
    third = await alice(
        "POST", "reservations", {"title": "debug", "gpus": ["gpu3:3"], "duration": "1h"}
    )
    assert third.status == 201, third
    started = at(third.body["start"])
    assert before - timedelta(seconds=1) <= started <= now()
    assert at(third.body["end"]) - started == timedelta(hours=1)
    assert third.body["status"] == "active"

    one = await bob("GET", f"reservations/{first['id']}")
    assert one.status == 200, one
    assert {k: v for k, v in one.body.items() if k != "status"} == {
        k: v for k, v in first.items() if k not in ("status", "description")
    }  # the description is alice's and the admins' (docs/privacy.md)

    a, b, c = first["id"], second.body["id"], third.body["id"]
    assert await ids(alice) == [c, a, b]  # default window: from now on, ordered by start
    # window is [start, end): the first ends at t+2h, so it is not in [t+2h, t+3h)
    assert await ids(alice, start=iso(t + timedelta(hours=2)), end=iso(t + timedelta(hours=3))) == [
        b
    ]
    assert await ids(alice, start=iso(t - timedelta(minutes=1)), end=iso(t)) == []
    assert await ids(alice, host="gpu1") == [a]
    assert await ids(alice, gpu="gpu2:0") == [b]
    assert await ids(alice, gpu=first["gpu_uuids"][1]) == [a]
    assert await ids(alice, user="bob") == [b]
    assert await ids(alice, user="alice", host="gpu3") == [c]
    assert await ids(alice, limit="1") == [c]

    hosts = await bob("GET", "hosts")
    assert hosts.status == 200
    assert [h["name"] for h in hosts.body["hosts"]] == ["gpu1", "gpu2", "gpu3"]
    assert [g["id"] for g in hosts.body["hosts"][0]["gpus"]] == [f"gpu1:{i}" for i in range(4)]

    # cancelled ones are listed only on request
    gone = await bob("DELETE", f"reservations/{b}")
    assert gone.status == 200, gone
    assert gone.body["status"] == "cancelled"
    assert gone.body["cancelled_at"] is not None
    assert await ids(alice) == [c, a]
    assert await ids(alice, include_cancelled="true") == [c, a, b]
    assert (await alice("GET", f"reservations/{b}")).body["status"] == "cancelled"


async def test_location_header_points_at_the_new_reservation(api: Any, jp_fetch: Any) -> None:
    t = soon(days=2)
    response = await jp_fetch(
        "gpuhive",
        "api",
        "reservations",
        method="POST",
        body=json.dumps(booking(["gpu1:0"], t, t + timedelta(hours=1))),
        headers={"Authorization": f"token {TOKENS['carol']}"},
    )
    assert response.code == 201
    created = json.loads(response.body)
    location = response.headers["Location"]
    assert location.endswith(f"/gpuhive/api/reservations/{created['id']}")
    fetched = await api("carol")("GET", location.split("/gpuhive/api/", 1)[1])
    assert fetched.status == 200
    assert fetched.body["id"] == created["id"]
    assert fetched.body["owner"] == "carol"


async def test_patch_edits_the_reservation_as_one_unit(api: Any) -> None:
    alice, bob, boss = api("alice"), api("bob"), api("boss")
    t = soon()
    made = await alice(
        "POST", "reservations", booking(["gpu1:0", "gpu1:1"], t, t + timedelta(hours=2))
    )
    rid = made.body["id"]

    text = await alice("PATCH", f"reservations/{rid}", {"title": " renamed ", "description": "d"})
    assert text.status == 200, text
    assert (text.body["title"], text.body["description"]) == ("renamed", "d")
    assert (text.body["start"], text.body["end"]) == (made.body["start"], made.body["end"])

    moved = await alice(
        "PATCH",
        f"reservations/{rid}",
        {"start": iso(t + timedelta(hours=1)), "end": iso(t + timedelta(hours=3))},
    )
    assert moved.status == 200, moved
    assert at(moved.body["start"]) == t + timedelta(hours=1)
    assert at(moved.body["end"]) == t + timedelta(hours=3)
    assert moved.body["gpus"] == ["gpu1:0", "gpu1:1"]

    swapped = await alice("PATCH", f"reservations/{rid}", {"gpus": ["gpu1:2", "gpu1:3"]})
    assert swapped.status == 200, swapped
    assert swapped.body["gpus"] == ["gpu1:2", "gpu1:3"]
    assert await ids(bob, gpu="gpu1:0") == []
    assert await ids(bob, gpu="gpu1:1") == []
    assert await ids(bob, gpu="gpu1:2") == [rid]
    assert await ids(bob, gpu="gpu1:3") == [rid]
    # the old GPUs are free at the old and new times; both new GPUs are taken
    freed = await bob(
        "POST", "reservations", booking(["gpu1:0", "gpu1:1"], t, t + timedelta(hours=3))
    )
    assert freed.status == 201, freed
    taken = await bob(
        "POST", "reservations", booking(["gpu1:3"], t + timedelta(hours=2), t + timedelta(hours=4))
    )
    refused(taken, 409, "alice", "gpu1:3")

    shorter = await alice("PATCH", f"reservations/{rid}", {"duration": "30m"})
    assert shorter.status == 200, shorter
    assert at(shorter.body["end"]) == t + timedelta(hours=1, minutes=30)

    # moving onto bob's GPUs is refused, and nothing about alice's reservation changes
    before = await snapshot(alice)
    clash = await alice("PATCH", f"reservations/{rid}", {"gpus": ["gpu1:0", "gpu1:2"]})
    refused(clash, 409, "bob", "gpu1:0")
    assert clash.body["conflicts"][0]["reservation"] == freed.body["id"]
    assert await snapshot(alice) == before

    # back-to-back with the (shortened) reservation is fine
    after = await bob(
        "POST", "reservations", booking(["gpu1:2"], at(shorter.body["end"]), t + timedelta(hours=5))
    )
    assert after.status == 201, after

    # admins may edit anyone's reservation
    by_admin = await boss("PATCH", f"reservations/{rid}", {"title": "admin was here"})
    assert by_admin.status == 200, by_admin
    assert by_admin.body["owner"] == "alice"
    assert (await bob("GET", f"reservations/{rid}")).body["title"] == "admin was here"


async def test_delete_cancels_upcoming_and_ends_running(api: Any) -> None:
    alice, bob, boss = api("alice"), api("bob"), api("boss")
    t = soon()
    upcoming = await alice(
        "POST", "reservations", booking(["gpu2:1", "gpu2:2"], t, t + timedelta(hours=1))
    )
    rid = upcoming.body["id"]
    cancelled = await alice("DELETE", f"reservations/{rid}")
    assert cancelled.status == 200, cancelled
    assert cancelled.body["status"] == "cancelled"
    assert at(cancelled.body["cancelled_at"]) <= now()
    assert cancelled.body["end"] == upcoming.body["end"]  # cancelling keeps the times
    assert await ids(bob, gpu="gpu2:1") == []
    # the slot is free again, on both GPUs
    rebooked = await bob(
        "POST", "reservations", booking(["gpu2:2", "gpu2:1"], t, t + timedelta(hours=1))
    )
    assert rebooked.status == 201, rebooked

    # a running reservation (start within the past grace) is ended now, not cancelled
    start = now() - timedelta(minutes=2)
    running = await alice(
        "POST",
        "reservations",
        {"title": "run", "gpus": ["gpu3:0"], "start": iso(start), "duration": "1h"},
    )
    assert running.status == 201, running
    assert running.body["status"] == "active"
    ended = await alice("DELETE", f"reservations/{running.body['id']}")
    after = now()
    assert ended.status == 200, ended
    assert ended.body["status"] == "ended"
    assert ended.body["cancelled_at"] is None
    assert at(ended.body["start"]) == start
    assert after - timedelta(seconds=5) <= at(ended.body["end"]) <= after
    again = await alice("GET", f"reservations/{running.body['id']}")
    assert again.body["status"] == "ended"
    assert again.body["end"] == ended.body["end"]
    # the rest of the hour is free for others
    follow = await bob(
        "POST", "reservations", {"title": "next", "gpus": ["gpu3:0"], "duration": "30m"}
    )
    assert follow.status == 201, follow

    # admins may cancel anyone's
    by_admin = await boss("DELETE", f"reservations/{rebooked.body['id']}")
    assert by_admin.status == 200, by_admin
    assert by_admin.body["status"] == "cancelled"


async def test_started_reservation_can_be_extended_and_ended_early(api: Any) -> None:
    alice = api("alice")
    before = await snapshot(alice)
    start = now()
    made = await alice(
        "POST",
        "reservations",
        {"title": "live", "gpus": ["gpu1:2", "gpu2:2"], "start": iso(start), "duration": "1h"},
    )
    assert made.status == 201, made
    assert made.body["status"] == "active"
    rid = made.body["id"]

    longer = await alice("PATCH", f"reservations/{rid}", {"end": iso(start + timedelta(hours=3))})
    assert longer.status == 200, longer
    assert at(longer.body["end"]) == start + timedelta(hours=3)
    assert at(longer.body["start"]) == start

    moved = await alice(
        "PATCH", f"reservations/{rid}", {"start": iso(start + timedelta(minutes=10))}
    )
    refused(moved, 422, "already begun", "start")
    regpu = await alice("PATCH", f"reservations/{rid}", {"gpus": ["gpu1:2"]})
    refused(regpu, 422, "already begun", "GPUs")
    past = await alice("PATCH", f"reservations/{rid}", {"end": iso(now() - timedelta(hours=1))})
    refused(past, 422, "past")
    too_long = await alice("PATCH", f"reservations/{rid}", {"end": iso(start + timedelta(days=4))})
    refused(too_long, 422, "at most 3d")
    current = await alice("GET", f"reservations/{rid}")
    assert current.body["end"] == longer.body["end"]
    assert current.body["status"] == "active"

    early = await alice("PATCH", f"reservations/{rid}", {"end": iso(now())})
    assert early.status == 200, early
    assert early.body["status"] == "ended"
    assert now() - timedelta(seconds=5) <= at(early.body["end"]) <= now()
    assert len(await snapshot(alice)) == len(before) + 1
