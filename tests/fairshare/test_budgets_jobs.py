"""Budgets refuse jobs that would overrun them (409): queued and preemptible jobs, jobs
requeued or started on GPUs their owner holds no booking of; a job on its owner's booking is
paid by the booking; a job without walltime is refused only once a budget is spent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.helpers import refused
from tests.api.test_api_shares import SHARED
from tests.conftest import book, iso, soon
from tests.fairshare.test_budgets_api import add_budget, around_today
from tests.fairshare.test_limits_api import sqlite_only


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "hosts": SHARED}  # gpu1's GPUs may be shared (80 GiB each)


def job(**fields: Any) -> dict[str, Any]:
    return {"name": "train", "command": "sleep 1", "queued": True, **fields}


async def test_a_queued_job_that_would_overrun_is_refused_with_what_is_left(api: Any) -> None:
    boss, alice, bob = api("boss"), api("alice"), api("bob")
    budget = await add_budget(boss, scope="group", name="phd", gpu_hours=4, **around_today())
    await book(bob, "half", ["gpu2:0"], soon(hours=2), "2h")  # 2 of 4 GPU-hours booked ahead
    big = job(walltime="2h", options={"gpu_count": 2})  # 4 GPU-hours
    words = refused(await alice("POST", "jobs", big), 409, "budget of group phd",
                    "it needs 4.00 GPU-hours", "2.00 of 4.00 GPU-hours are left",
                    "ends on", "2 GPU × 2 h outside any booking")  # fmt: skip
    assert "An overdraft" not in words
    reply = await alice("POST", "jobs", big)
    assert reply.body["budget"]["budget"]["id"] == budget["id"], reply.body
    assert reply.body["budget"]["gpu_hours"]["left"] == pytest.approx(2), reply.body
    # named GPUs count each; preemptible jobs count too
    named = job(walltime="90m", gpus=["gpu3:0", "gpu3:1"])  # 3 GPU-hours
    refused(await alice("POST", "jobs", named), 409, "it needs 3.00 GPU-hours")
    lent = job(walltime="3h", preemptible=True, options={"gpu_count": 1})
    refused(await alice("POST", "jobs", lent), 409, "budget of group phd")
    # what fits is made: 1 GPU × 2 h
    fits = await alice("POST", "jobs", job(walltime="2h", options={"gpu_count": 1}))
    assert fits.status == 201, fits
    # carol, of another group and without budget, is not bound by phd's
    carol = api("carol")
    assert (await carol("POST", "jobs", big)).status == 201


@sqlite_only
async def test_a_share_job_counts_its_share_and_an_overdraft_says_how_much_more(
    api: Any,
) -> None:
    boss, alice = api("boss"), api("alice")
    await add_budget(boss, scope="user", name="alice", gpu_hours=1, overdraft_percent=50,
                     **around_today())  # fmt: skip
    # a quarter of an 80 GiB GPU for 4 h is one GPU-hour: it fits (a queued job counts
    # what it runs, not what it asks, so it takes nothing from the next one)
    quarter = job(walltime="4h", options={"gpu_count": 1, "memory": "20GiB"})
    assert (await alice("POST", "jobs", quarter)).status == 201
    half = job(walltime="4h", options={"gpu_count": 1, "memory": "40GiB"})
    words = refused(await alice("POST", "jobs", half), 409, "it needs 2.00 GPU-hours",
                    "An overdraft of 50 % is allowed")  # fmt: skip
    assert "1.50 GPU-hours more at most" in words, words


@sqlite_only
async def test_a_job_on_its_booking_is_paid_by_the_booking(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    await add_budget(boss, scope="user", name="alice", gpu_hours=2, **around_today())
    made = await book(alice, "all of it", ["gpu1:0", "gpu1:1"], soon(hours=1), "1h")
    on_it = job(walltime="1h", reservation=made.body["id"])
    reply = await alice("POST", "jobs", on_it)
    assert reply.status == 201, reply
    # the same job outside the booking would be a second charge the budget has no room for
    refused(await alice("POST", "jobs", job(walltime="1h", gpus=["gpu2:0"])), 409,
            "0.00 of 2.00 GPU-hours are left")  # fmt: skip


@sqlite_only
async def test_a_job_without_walltime_is_refused_only_when_a_budget_is_spent(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    await add_budget(boss, scope="user", name="alice", gpu_hours=2, **around_today())
    open_ended = job(options={"gpu_count": 4})
    first = await alice("POST", "jobs", open_ended)
    assert first.status == 201, first  # its length is unknown: the queue holds it once spent
    await book(alice, "the rest", ["gpu1:0", "gpu1:1"], soon(hours=1), "1h")
    refused(await alice("POST", "jobs", open_ended), 409, "has no walltime",
            "budget of user alice", "is spent", "ends on")  # fmt: skip


@sqlite_only
async def test_requeueing_and_starting_outside_bookings_are_checked(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    budget = await add_budget(boss, scope="user", name="alice", gpu_hours=3, **around_today())
    made = await alice("POST", "jobs", job(walltime="1h", gpus=["gpu2:0", "gpu2:1"]))
    assert made.status == 201, made
    path = f"jobs/{made.body['id']}"
    assert (await alice("POST", f"{path}/dequeue")).status == 200
    # the budget is spent meanwhile: back into the queue would overrun it, so would a start
    await book(alice, "most", ["gpu1:0", "gpu1:1"], soon(hours=1), "1h")  # 1 GPU-hour left
    refused(await alice("POST", f"{path}/enqueue"), 409, "Job", "it needs 2.00 GPU-hours",
            "1.00 of 3.00 GPU-hours are left")  # fmt: skip
    refused(await alice("POST", f"{path}/start"), 409, "1.00 of 3.00 GPU-hours are left")
    # the admin raises the budget: it goes back into the queue
    raised = {k: budget[k] for k in ("scope", "name", "period", "starts", "ends")}
    assert (await boss("PUT", f"budgets/{budget['id']}", {**raised, "gpu_hours": 10})).status == 200
    back = await alice("POST", f"{path}/enqueue")
    assert back.status == 200 and back.body["queued"] is True, back


@sqlite_only
async def test_a_scheduled_job_counts_the_gpus_not_booked_then(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    await add_budget(boss, scope="user", name="alice", gpu_hours=3, **around_today())
    at = soon(hours=4)
    later = {"name": "nightly", "command": "sleep 1", "gpus": ["gpu2:0", "gpu2:1"],
             "start_at": iso(at), "walltime": "2h"}  # fmt: skip
    refused(await alice("POST", "jobs", later), 409, "it needs 4.00 GPU-hours",
            "3.00 of 3.00 GPU-hours are left")  # fmt: skip
    # with both GPUs booked then (2 of the 3 GPU-hours), the booking pays: it is made
    await book(alice, "for the job", ["gpu2:0", "gpu2:1"], at, "1h")
    made = await alice("POST", "jobs", {**later, "walltime": "1h"})
    assert made.status == 201, made


@sqlite_only
async def test_bad_job_input_is_still_refused_before_any_budget(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    await add_budget(boss, scope="user", name="alice", gpu_hours=0, **around_today())
    refused(
        await alice("POST", "jobs", job(walltime="soon", options={"gpu_count": 1})), 422, "walltime"
    )
    refused(await alice("POST", "jobs", job(walltime="1h", gpus=[])), 422, "'gpus'")
    refused(await alice("POST", "jobs", job(walltime="1h", gpus=["gpu9:9"])), 422, "Unknown GPU")
    refused(await alice("POST", "jobs/999999/enqueue"), 404)
    refused(await alice("POST", "jobs", job(walltime="1h", options={"gpu_count": 1})), 409,
            "0.00 of 0.00 GPU-hours are left")  # fmt: skip
