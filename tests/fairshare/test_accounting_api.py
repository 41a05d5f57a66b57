"""The accounting report and usage scores through the REST API: JSON and CSV, who sees what,
and bad months."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.api.helpers import refused
from tests.conftest import book, soon

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
H = timedelta(hours=1)
WARSAW = ZoneInfo("Europe/Warsaw")  # the site time zone of the test configuration


async def test_report_and_scores_as_admins_and_users_see_them(api: Any, jp_serverapp: Any) -> None:
    start = soon(hours=4)
    month = start.astimezone(WARSAW).strftime("%Y-%m")
    alice, bob, boss = api("alice"), api("bob"), api("boss")
    await book(alice, "a", ["gpu1:0", "gpu1:1"], start, "2h")
    await book(bob, "b", ["gpu2:0"], start, "1h")

    everything = await boss("GET", "reports/accounting", params={"month": month})
    assert everything.status == 200, everything
    rows = {(r["scope"], r["name"]): r for r in everything.body["rows"]}
    assert rows[("user", "alice")]["reserved_gpu_hours"] == 4
    assert rows[("user", "bob")]["reserved_gpu_hours"] == 1
    assert rows[("group", "phd")]["reserved_gpu_hours"] == 5
    assert rows[("host", "gpu1")]["reserved_gpu_hours"] == 4
    assert rows[("site", None)]["reserved_gpu_hours"] == 5
    assert everything.body["check"]["users_add_up"] and everything.body["check"]["hosts_add_up"]

    mine = await alice("GET", "reports/accounting", params={"month": month})
    shown = {(r["scope"], r["name"]) for r in mine.body["rows"]}
    assert ("user", "alice") in shown and ("user", "bob") not in shown
    assert ("site", None) in shown and ("host", "gpu2") in shown

    table = await boss("GET", "reports/accounting.csv", params={"month": month})
    assert table.status == 200 and isinstance(table.body, str)
    lines = list(csv.DictReader(io.StringIO(table.body)))
    assert any(
        (r["month"], r["scope"], r["name"]) == (month, "user", "alice")
        and float(r["reserved_gpu_hours"]) == 4
        for r in lines
    )

    hive = jp_serverapp.web_app.settings["gpuhive"]
    past = soon(hours=0, days=-2)
    for owner, ref in (("alice", "gpu3:0"), ("bob", "gpu3:1")):  # scores cover the past
        gpu = hive.store.inventory.gpu(ref)
        await hive.run(hive.store.reservations.create, owner, "p", "", past, past + 3 * H,
                       [gpu.id])  # fmt: skip
    scores = await boss("GET", "usage/scores")
    assert {s["user"] for s in scores.body["scores"]} >= {"alice", "bob"}
    assert scores.body["window"] == "30d"
    own = await alice("GET", "usage/scores")
    assert [s["user"] for s in own.body["scores"]] == ["alice"]
    (score,) = own.body["scores"]
    assert score["reserved_gpu_hours"] == 3 and score["idle_reserved_gpu_hours"] == 3
    assert score["no_shows"] == 0 and score["efficiency"] == 0


async def test_bad_report_requests(api: Any) -> None:
    boss = api("boss")
    refused(await boss("GET", "reports/accounting", params={"month": "2026-13"}), 422, "month")
    refused(await boss("GET", "reports/accounting", params={"month": "soon"}), 422, "month")
    refused(
        await boss("GET", "reports/accounting", params={"month": "2026-11", "until": "2026-10"}),
        422,
        "before",
    )
    refused(
        await boss("GET", "reports/accounting", params={"month": "2020-01", "until": "2026-01"}),
        422,
        "24 months",
    )
    refused(await api(None)("GET", "reports/accounting"), 401)
