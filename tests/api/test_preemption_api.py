"""Preemptible jobs and lending through the REST API: the fields, the reclaim endpoint and
their bad inputs (the engine itself: tests/jobs/test_preemption.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.helpers import booking, refused
from tests.conftest import soon

JOB = {"name": "borrow", "command": "python3 train.py", "gpus": ["gpu1:0"], "queued": True,
       "walltime": "1h"}  # fmt: skip


async def test_preemptible_job_fields_and_bad_inputs(api: Any) -> None:
    alice = api("alice")
    for bad, status, words in (
        ({"preempt_signal": "SIGKILL"}, 422, ("preempt_signal", "SIGUSR1")),
        ({"preempt_signal": 15}, 400, ("preempt_signal",)),
        ({"grace_s": 31}, 422, ("grace_s", "30")),  # the site's preempt_grace_s
        ({"grace_s": -1}, 422, ("grace_s",)),
        ({"queued": False}, 422, ("queued",)),
    ):
        reply = await alice("POST", "jobs/preview", {**JOB, "preemptible": True, **bad})
        refused(reply, status, *words)
    reply = await alice("POST", "jobs/preview", {**JOB, "grace_s": 5})
    refused(reply, 422, "preemptible")

    made = await alice("POST", "jobs", {**JOB, "preemptible": True, "preempt_signal": "SIGUSR1",
                                        "grace_s": 10})  # fmt: skip
    assert made.status == 201, made
    job = made.body
    assert (job["preemptible"], job["preempt_signal"], job["grace_s"]) == (True, "SIGUSR1", 10)
    assert (job["restarts"], job["lent_from"], job["history"]) == (0, None, [])
    plain = await alice("POST", "jobs", {**JOB, "name": "plain"})
    assert plain.status == 201, plain
    assert (plain.body["preemptible"], plain.body["preempt_signal"]) == (False, "SIGTERM")


async def test_lending_choice_and_reclaim(api: Any) -> None:
    alice, bob, boss = api("alice"), api("bob"), api("boss")
    t = soon()
    made = await alice("POST", "reservations",
                       {**booking(["gpu1:1"], t, t + timedelta(hours=1)), "lend": False})  # fmt: skip
    assert made.status == 201, made
    rid = made.body["id"]
    assert (made.body["lend"], made.body["reclaim_before_start"], made.body["lent_to"]) == (
        False, False, [],
    )  # fmt: skip
    changed = await alice("PATCH", f"reservations/{rid}", {"reclaim_before_start": True})
    assert changed.status == 200, changed
    assert (changed.body["lend"], changed.body["reclaim_before_start"]) == (False, True)
    changed = await alice("PATCH", f"reservations/{rid}", {"lend": True})
    assert (changed.body["lend"], changed.body["reclaim_before_start"]) == (True, True)
    listed = await bob("GET", "reservations")
    [mine] = [r for r in listed.body["reservations"] if r["id"] == rid]
    assert (mine["lend"], mine["lent_to"]) == (True, [])
    refused(await bob("PATCH", f"reservations/{rid}", {"lend": False}), 403)
    refused(await alice("PATCH", f"reservations/{rid}", {"lend": None}), 400, "lend")

    # Reclaim: the holder or an admin; nothing on loan, nothing to signal.
    refused(await bob("POST", f"reservations/{rid}/reclaim"), 403, "alice")
    refused(await alice("POST", "reservations/99999/reclaim"), 404)
    for who in (alice, boss):
        reply = await who("POST", f"reservations/{rid}/reclaim")
        assert reply.status == 200, reply
        assert reply.body["reclaimed"] == []
        assert datetime.fromisoformat(reply.body["free_by"]) <= datetime.now(UTC)  # free now
        # and the booking lends no more (Bookings.stop_lending, with its event)
        shown = await alice("GET", f"reservations/{rid}")
        assert (shown.body["lend"], shown.body["reclaim_before_start"]) == (False, True), shown
        changed = await alice("PATCH", f"reservations/{rid}", {"lend": True})
        assert changed.body["lend"] is True
    gone = await alice("DELETE", f"reservations/{rid}")
    assert gone.status == 200, gone
    refused(await alice("POST", f"reservations/{rid}/reclaim"), 409, "over")
