"""The budget view: a budget's standing and its group's statement as bars per user or host,
the periods before and after (a real server, through HiveClient; the meter's charges written
to the server's own database)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from jupyter_gpuhive import widgets
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.accounting import QUEUED, RESERVED, Charge
from jupyter_gpuhive.widgets.budget_model import BudgetModel
from tests.support.server import JupyterServer


def charge(server: JupyterServer, *rows: tuple[str, str, str, float, float]) -> None:
    """What the meter would have charged this hour: (user, GPU, kind, hours, kWh) each."""
    config = json.loads((server.dir / "jupyter_server_config.json").read_text())
    store = Store(config["GpuHiveApp"]["db_url"]).open()
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    try:
        store.accounting.record([
            Charge(store.inventory.gpu(gpu).id, hour, hour.replace(day=1), user, kind,
                   hours * 3600, energy_j=kwh * 3.6e6)
            for user, gpu, kind, hours, kwh in rows
        ])  # fmt: skip
    finally:
        store.close()


def test_standing_statement_bars_and_periods(as_user: Any, hive_server: JupyterServer) -> None:
    boss, alice = as_user("boss"), as_user("alice")
    for member in (alice, as_user("bob")):  # gpuhive learns they are in phd
        member.request("GET", "me")
    made = boss.request("POST", "budgets", {"scope": "group", "name": "phd", "gpu_hours": 100,
                                             "kwh": 40, "period": "month"})  # fmt: skip
    charge(hive_server, ("alice", "gpu05:0", RESERVED, 3.0, 1.5),
           ("alice", "gpu06:1", QUEUED, 1.0, 0.5), ("bob", "gpu05:1", RESERVED, 2.0, 0.75))  # fmt: skip

    view = widgets.budgets(boss)
    assert view.model.chosen is not None and view.model.chosen["id"] == made["id"]
    assert view.budget.options[0] == ("group phd (month)", made["id"])
    assert "group phd, " in view.standing.value and "6.00 GPU-hours used" in view.standing.value
    assert "94.00 left" in view.standing.value and "renews" in view.standing.value
    assert (list(view.bars.x), list(view.bars.y)) == (["alice", "bob"], [4.0, 2.0])
    view.by.value, view.unit.value = "host", "kwh"
    assert (list(view.bars.x), list(view.bars.y)) == (["gpu05", "gpu06"], [2.25, 0.5])
    assert view.y_axis.label == "kWh" and "queued" in view.table.value

    # the month before: nothing used then
    view.model.shift(-1)
    assert view.model.rows == [] and view.table.value == "No use yet."
    assert "0.00 GPU-hours used" in view.standing.value
    view.model.shift(1)
    assert view.model.bars("user", "gpu_hours") == (["alice", "bob"], [4.0, 2.0])

    # a member sees her group's standing, not who used what
    mine = BudgetModel(alice)
    mine.load()
    assert mine.chosen is not None and mine.rows == []
    assert "may not read a budget's statement" in mine.statement_error
    assert widgets.budgets(as_user("carol")).standing.value == "No budget applies to you."
