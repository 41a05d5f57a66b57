"""Budgets through the REST API: 50 clients of one group racing its last GPU-hours (SQLite and
PostgreSQL), edits, use correcting bookings, who sees and changes what, statements, the
queue's question, and bad input."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from jupyter_gpuhive.store.accounting import RESERVED, Charge
from tests.api.helpers import WARSAW, booking, refused
from tests.api.test_api_shares import SHARED
from tests.conftest import Call, book, iso, soon
from tests.fairshare.test_limits_api import GPUS, H, sqlite_only

# GPU-hours booked by the group phd (alice, bob) that are not cancelled
BOOKED_HOURS = text(
    """
    SELECT rg.start_at, rg.end_at, rg.share_ppm FROM reservation_gpus rg
    JOIN reservations r ON r.id = rg.reservation_id
    WHERE r.owner IN ('alice', 'bob') AND NOT rg.cancelled
    """
)


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "hosts": SHARED}  # gpu1's GPUs may be shared


def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def booked_hours(db_url: str) -> float:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(BOOKED_HOURS).all()
    finally:
        engine.dispose()
    return sum(
        (_instant(b) - _instant(a)).total_seconds() / 3600 * share / 1e6 for a, b, share in rows
    )


def around_today(days: int = 40) -> dict[str, str]:
    """A budget over dates from yesterday to `days` ahead (site time): no month boundary."""
    today = datetime.now(WARSAW).date()
    return {"period": "dates", "starts": str(today - timedelta(days=1)),
            "ends": str(today + timedelta(days=days))}  # fmt: skip


async def add_budget(call: Call, **fields: Any) -> dict[str, Any]:
    reply = await call("POST", "budgets", fields)
    assert reply.status == 201, reply
    return reply.body  # type: ignore[no-any-return]


async def test_fifty_clients_of_a_group_never_overrun_its_budget(api: Any, db_url: str) -> None:
    boss = api("boss")
    made = await add_budget(boss, scope="group", name="phd", gpu_hours=10, **around_today())
    start = soon(hours=3)
    # 50 one-hour bookings on distinct (GPU, slot) pairs by two members: none clashes with
    # another, so only the budget can refuse them
    bodies = [
        booking([GPUS[i % 12]], start + (i // 12) * 2 * H, start + (i // 12) * 2 * H + H, f"r{i}")
        for i in range(50)
    ]
    alice, bob = api("alice"), api("bob")
    replies = await asyncio.gather(
        *((alice if i % 2 else bob)("POST", "reservations", b) for i, b in enumerate(bodies))
    )
    won = [r for r in replies if r.status == 201]
    lost = [r for r in replies if r.status != 201]
    assert len(won) == 10 and len(lost) == 40
    for reply in lost:
        words = refused(reply, 409, "budget of group phd", "0.00 of 10.00 GPU-hours are left")
        assert "ends on" in words and "does not renew" in words, words
        assert reply.body["budget"]["gpu_hours"]["left"] == 0, reply.body
    assert booked_hours(db_url) == pytest.approx(10)
    state = await alice("GET", f"budgets/{made['id']}")
    assert state.status == 200, state
    figures = state.body["standing"]["gpu_hours"]
    assert figures["committed"] == pytest.approx(10) and figures["left"] == pytest.approx(0)
    assert state.body["standing"]["renews_at"] is None  # a budget over dates ends


@sqlite_only
async def test_a_monthly_budget_says_when_it_renews_and_edits_grow_within_it(api: Any) -> None:
    boss, carol = api("boss"), api("carol")
    await add_budget(boss, scope="user", name="carol", gpu_hours=0.5, period="month")
    refusal = await carol("POST", "reservations", booking(["gpu1:0"], soon(), soon() + 2 * H))
    words = refused(refusal, 409, "budget of user carol", "renews on", "GPU-hours")
    assert "An overdraft" not in words
    # a quarter of a GPU for 2 h is half a GPU-hour: it fits, and no more does
    quarter = {**booking(["gpu1:1"], soon(), soon() + 2 * H), "share": 0.25}
    assert (await carol("POST", "reservations", quarter)).status == 201
    more = {**booking(["gpu1:2"], soon(), soon() + H), "share": 0.25}
    refused(await carol("POST", "reservations", more), 409, "it needs 0.25 GPU-hours")
    alice = api("alice")
    await add_budget(boss, scope="user", name="alice", gpu_hours=3, **around_today())
    made = await book(alice, "fits", ["gpu2:0"], soon(hours=5), "2h")
    path = f"reservations/{made.body['id']}"
    longer = await alice("PATCH", path, {"end": iso(soon(hours=5) + 4 * H)})
    refused(longer, 409, "budget of user alice")
    assert (await alice("PATCH", path, {"title": "renamed"})).status == 200
    assert (await alice("PATCH", path, {"end": iso(soon(hours=5) + H)})).status == 200
    assert (await alice("PATCH", path, {"end": iso(soon(hours=5) + 3 * H)})).status == 200


@sqlite_only
async def test_an_overdraft_lets_bookings_go_over_by_its_share(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    budget = await add_budget(
        boss, scope="group", name="phd", gpu_hours=2, overdraft_percent=50, **around_today()
    )
    await book(alice, "within", ["gpu1:0"], soon(hours=2), "2h")
    await book(alice, "overdraft", ["gpu1:0"], soon(hours=4), "1h")  # 3 of 2 + 50 %
    words = refused(
        await alice("POST", "reservations", booking(["gpu1:0"], soon(hours=6), soon(hours=7))),
        409,
        "An overdraft of 50 % is allowed",
    )
    assert "0.00 GPU-hours more at most" in words, words
    state = await boss("GET", f"budgets/{budget['id']}")
    assert state.body["standing"]["gpu_hours"]["left"] == pytest.approx(-1)


@sqlite_only
async def test_use_corrects_what_counts_and_the_statement_shows_it(
    api: Any, jp_serverapp: Any
) -> None:
    boss, alice, bob, carol = api("boss"), api("alice"), api("bob"), api("carol")
    budget = await add_budget(boss, scope="group", name="phd", gpu_hours=5, kwh=2, **around_today())
    await book(alice, "soon", ["gpu1:0"], soon(hours=2), "2h")
    await book(bob, "me too", ["gpu1:1"], soon(hours=2), "1h")
    hive = jp_serverapp.web_app.settings["gpuhive"]
    gpu = hive.store.inventory.gpu("gpu2:0")
    now = datetime.now(WARSAW)
    hour = now.astimezone(WARSAW).replace(minute=0, second=0, microsecond=0)
    # 1.5 GPU-hours and 0.9 kWh the meter charged alice within the period (already past)
    hive.store.accounting.record(
        [Charge(gpu.id, hour, hour.replace(day=1), "alice", RESERVED, 5400, energy_j=3.24e6)]
    )
    state = await alice("GET", f"budgets/{budget['id']}")
    hours, kwh = state.body["standing"]["gpu_hours"], state.body["standing"]["kwh"]
    assert hours["used"] == pytest.approx(1.5) and hours["committed"] == pytest.approx(3)
    assert hours["left"] == pytest.approx(0.5)
    assert kwh["used"] == pytest.approx(0.9) and kwh["committed"] == pytest.approx(0.9)
    refused(
        await alice("POST", "reservations", booking(["gpu1:2"], soon(hours=6), soon(hours=7))),
        409,
        "0.50 of 5.00 GPU-hours are left",
    )
    # the statement: who used what on which hosts; the CSV says the same
    statement = await boss("GET", f"budgets/{budget['id']}/statement")
    assert statement.status == 200, statement
    assert statement.body["rows"] == [
        {"user": "alice", "host": "gpu2", "kind": "reserved", "gpu_hours": 1.5, "kwh": 0.9}
    ]
    csv = await boss("GET", f"budgets/{budget['id']}/statement.csv")
    assert csv.body.splitlines() == ["user,host,kind,gpu_hours,kwh", "alice,gpu2,reserved,1.5,0.9"]
    # a member sees the budget, not who used what; a stranger sees nothing of it
    refused(await alice("GET", f"budgets/{budget['id']}/statement"), 403, "Who may")
    assert [b["id"] for b in (await alice("GET", "budgets")).body["budgets"]] == [budget["id"]]
    assert (await carol("GET", "budgets")).body["budgets"] == []
    refused(await carol("GET", f"budgets/{budget['id']}"), 404, "no budget")


@sqlite_only
async def test_the_queue_holds_jobs_of_a_spent_budget_and_says_why(
    api: Any, jp_serverapp: Any
) -> None:
    boss, alice = api("boss"), api("alice")
    await add_budget(boss, scope="user", name="alice", gpu_hours=1, **around_today())
    job = {"name": "p", "command": "sleep 1", "queued": True, "walltime": "10m",
           "options": {"gpu_count": 1}}  # fmt: skip
    made = await alice("POST", "jobs", job)
    assert made.status == 201, made
    await book(alice, "all of it", ["gpu1:0"], soon(hours=2), "1h")  # spent after it queued
    hive = jp_serverapp.web_app.settings["gpuhive"]
    report = await hive.jobs.scheduler.tick()
    assert report.admitted == []
    why = report.waiting[made.body["id"]]
    assert why.startswith("the budget of user alice for ") and "is spent (100 %)" in why
    shown = (await alice("GET", "queue")).body["jobs"]
    assert [j["waiting_for"] for j in shown] == [why]


@sqlite_only
async def test_budget_changes_are_for_site_admins_and_bad_input_is_refused(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    good = {"scope": "group", "name": "phd", "gpu_hours": 10}
    refused(await alice("POST", "budgets", good), 403, "Only gpuhive admins may set")
    cases = [
        ({**good, "colour": "red"}, 400, "Unknown field"),
        ({**good, "scope": "lab"}, 422, "scope"),
        ({**good, "gpu_hours": -1}, 422, "gpu_hours"),
        ({**good, "gpu_hours": "ten"}, 400, "gpu_hours"),
        ({"scope": "group", "name": "phd"}, 422, "'gpu_hours', 'kwh' or both"),
        ({**good, "period": "dates"}, 422, "'starts' and 'ends'"),
        ({**good, "period": "dates", "starts": "2030-02-01", "ends": "2030-01-01"}, 422, "ends"),
        ({**good, "starts": "2030-01-01"}, 422, "period 'dates'"),
        ({**good, "starts": "tomorrow", "period": "dates", "ends": "2030-01-01"}, 422, "day"),
        ({**good, "warn_at": [80, "x"]}, 400, "warn_at"),
        ({**good, "warn_at": [0]}, 422, "warn_at"),
        ({**good, "name": ""}, 422, "name"),
    ]
    dates = {"period": "dates", "starts": "2030-01-01", "ends": "2030-02-01"}
    cases.append(({**good, **dates, "carry_over": True}, 422, "carries over"))
    for body, status, words in cases:
        refused(await boss("POST", "budgets", body), status, words)
    made = await add_budget(boss, **good)
    path = f"budgets/{made['id']}"
    changed = await boss("PUT", path, {**good, "gpu_hours": 20, "carry_over": True})
    assert changed.status == 200 and changed.body["gpu_hours"] == 20, changed
    assert changed.body["standing"]["renews_at"] is not None
    refused(await alice("PUT", path, good), 403)
    refused(await alice("DELETE", path), 403)
    refused(await boss("GET", "budgets/999999"), 404, "no budget 999999")
    refused(await boss("GET", "budgets/abc"), 404, "ids are numbers")
    refused(await boss("PUT", "budgets/999999", good), 404)
    refused(await boss("GET", path, params={"at": "yesterday"}), 422)
    assert (await boss("DELETE", path)).body == {"deleted": made["id"]}
    refused(await boss("DELETE", path), 404)
