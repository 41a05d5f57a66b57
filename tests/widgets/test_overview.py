"""OverviewModel/View: the 64 GPUs × 30 days of hours grid, colours, selection → calendar."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import bqplot as bq
import numpy as np

from jupyter_gpuhive.widgets import overview as overview_entry
from jupyter_gpuhive.widgets.calendar_model import CalendarModel
from jupyter_gpuhive.widgets.overview_model import FREE, MINE, OTHERS, OverviewModel
from jupyter_gpuhive.widgets.overview_view import OverviewView
from tests.widgets.conftest import next_monday

UTC = timezone.utc


def test_64_gpus_by_30_days_of_hours(as_user: Any) -> None:
    boss, alice = as_user("boss"), as_user("alice")
    today = datetime.now(UTC).date()
    origin = datetime.combine(today, datetime.min.time(), tzinfo=UTC)
    # 300 bookings of 5 h by two other people, spread over hosts gpu02-gpu16 and the month.
    for i in range(300):
        host, k = f"gpu{i % 15 + 2:02d}", i // 15
        start = origin + timedelta(days=3 + k, hours=i % 7 + 1)
        owner = ("bob", "carol")[i % 2]
        boss.request("POST", "reservations", {"title": f"b{i}", "owner": owner,
                     "gpus": [f"{host}:{k % 4}"], "start": start.isoformat(),
                     "duration": "5h"})  # fmt: skip
    mine = alice.reserve(
        title="mine",
        gpus=["gpu05:3"],
        start=(origin + timedelta(days=29, hours=10)).isoformat(),
        duration="3h",
    )

    model = OverviewModel(alice, start=today, days=30, slot="1h", zone="UTC")
    t0 = time.perf_counter()
    model.load()
    load_ms = (time.perf_counter() - t0) * 1000
    assert model.matrix.shape == (64, 720)
    assert list(model.hosts)[:2] == ["gpu01", "gpu02"] and model.hosts["gpu01"] == [0, 1, 2, 3]
    row = model.gpus.index("gpu05:3")
    assert list(model.matrix[row, 29 * 24 + 10 : 29 * 24 + 13]) == [MINE] * 3
    assert model.describe(row, 29 * 24 + 11).endswith("alice — mine")
    assert int((model.matrix == OTHERS).sum()) == 300 * 5  # this module's server: no others
    assert model.matrix[model.gpus.index("gpu01:0"), 0] == FREE
    ticks = model.day_ticks()
    assert ticks[0.0] == today.strftime("%d %b") and len(ticks) == 31  # a tick per midnight
    labelled = [k for k, v in ticks.items() if v]
    assert labelled == [24.0 * d for d in (0, 7, 14, 21, 28)]  # weekly labels over 30 days

    t0 = time.perf_counter()
    view = OverviewView(model)
    build_ms = (time.perf_counter() - t0) * 1000
    assert isinstance(view.grid, bq.HeatMap)  # canvas: 46,080 cells
    assert np.asarray(view.grid.color).shape == (64, 720)
    t0 = time.perf_counter()
    model.load()  # a refresh rebuilds the view from the listener
    update_ms = (time.perf_counter() - t0) * 1000
    print(f"overview 64x720: load {load_ms:.0f} ms, view {build_ms:.0f} ms, "
          f"refresh {update_ms:.0f} ms")  # fmt: skip
    alice.cancel(mine["id"])


def test_small_grid_is_selectable_and_filters_the_calendar(as_user: Any) -> None:
    alice = as_user("alice")
    cal = CalendarModel(alice, start=next_monday(), zone="UTC")
    cal.load()
    assert len(cal.gpus) == 64
    view = overview_entry(alice, days=7, slot="1d", zone="UTC")
    assert isinstance(view.grid, bq.GridHeatMap) and view.model.matrix.shape == (64, 7)
    view.model.link(cal)
    view.hosts.value = ("gpu03",)
    view.gpus.value = ("gpu07:1",)
    view._apply_selection()
    assert cal.gpus == ["gpu03:0", "gpu03:1", "gpu03:2", "gpu03:3", "gpu07:1"]
    assert len(cal.gpus) == 5  # a lane each
    view._cells_selected({"new": [[8, 2], [9, 4]]})  # clicking cells of two rows
    assert cal.gpus == ["gpu03:0", "gpu03:1"]
