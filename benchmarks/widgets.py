"""Kernel-side cost of the notebook views: calendar and overview model + widget build.

The server's replies are generated in the API's shapes and served by an in-process stand-in
client, so only the kernel's work is timed (decoding is the client's and not included).
  calendar: 64 GPUs × 7 days with 2,000 reservations and every GPU's health, one failed and
  one drained (model.load → boxes and unbookable rows, then the view)
  overview: 64 GPUs × 30 days of hours = 46,080 cells (model.load → grid, then the view)
Last line: one JSON object with calendar_build_ms, overview_build_ms (= overview_64x720_build_ms)
and the update (reload + redraw) times. Target: ≤ 300 ms each. `--quick`: fewer repeats;
`--smoke`: one.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_gpuhive.sim.inventory import make_uuid
from jupyter_gpuhive.widgets.calendar_model import CalendarModel
from jupyter_gpuhive.widgets.calendar_view import CalendarView
from jupyter_gpuhive.widgets.overview_model import OverviewModel
from jupyter_gpuhive.widgets.overview_view import OverviewView

UTC = timezone.utc
HOSTS, PER_HOST = 16, 4
USERS = ["alice", "bob", "carol", "dave", "erin", "frank"]


class CannedClient:
    """Answers the view's GET requests from prepared replies."""

    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies

    def request(self, method: str, path: str, body: Any = None, params: Any = None) -> Any:
        return self.replies[path]


def inventory() -> list[dict[str, Any]]:
    return [
        {"name": f"gpu{h:02d}",
         "gpus": [{"id": f"gpu{h:02d}:{i}", "host": f"gpu{h:02d}", "index": i} for i in range(PER_HOST)]}
        for h in range(1, HOSTS + 1)
    ]  # fmt: skip


def health(at: datetime) -> dict[str, Any]:
    """GET health's reply (monitor.health: every GPU with its condition): most GPUs ok, one
    degraded (still bookable), one failed and one drained (painted unbookable)."""
    special = {
        "gpu01:1": {"state": "failed", "reasons": ["uncorrectable ECC errors since the driver "
                                                   "loaded: 2"], "since": at.isoformat()},
        "gpu02:3": {"drained": True, "drained_by": "admin", "drain_reason": "fan replacement"},
        "gpu03:0": {"state": "degraded", "reasons": ["3 pages pending retirement"],
                    "since": at.isoformat()},
    }  # fmt: skip
    gpus = []
    for h in inventory():
        for g in h["gpus"]:
            condition = {
                "state": "ok",
                "reasons": [],
                "since": None,
                "drained": False,
                "drained_by": None,
                "drain_reason": None,
                **special.get(g["id"], {}),
            }
            bookable = condition["state"] != "failed" and not condition["drained"]
            gpus.append({"gpu": g["id"], "uuid": make_uuid(h["name"], "GPU", g["index"]),
                         "host": h["name"], **condition, "bookable": bookable})  # fmt: skip
    return {"gpus": gpus}


def reservations(start: datetime, count: int, rng: random.Random) -> list[dict[str, Any]]:
    """`count` non-overlapping bookings spread over 64 GPUs × 7 days."""
    gpus = [g["id"] for h in inventory() for g in h["gpus"]]
    per_gpu = count // len(gpus) + 1
    slot = timedelta(days=7) / per_gpu
    out = []
    for n in range(count):
        gpu, k = gpus[n % len(gpus)], n // len(gpus)
        a = start + slot * k
        b = a + slot * rng.uniform(0.3, 0.95)
        owner = rng.choice(USERS)
        out.append({"id": n + 1, "owner": owner, "title": f"job {n}", "description": "",
                    "start": a.isoformat(), "end": b.isoformat(), "gpus": [gpu],
                    "status": "upcoming"})  # fmt: skip
    return out


def overview_reply(start: datetime, days: int, rng: random.Random) -> dict[str, Any]:
    slots = days * 24
    rows = []
    for h in inventory():
        for g in h["gpus"]:
            states = "".join(rng.choice("ffffoom") for _ in range(slots))
            cells = [None if s == "f" else 1 for s in states]
            rows.append({**g, "uuid": "", "model": None, "memory_mib": None, "states": states,
                         "cells": cells})  # fmt: skip
    return {"start": start.isoformat(), "end": (start + timedelta(days=days)).isoformat(),
            "slot_seconds": 3600.0, "slots": slots, "gpus": rows,
            "reservations": {"1": {"owner": "bob", "title": "x"}}}  # fmt: skip


def timed(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(samples), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 10")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    args = parser.parse_args()
    repeat = 1 if args.smoke else 3 if args.quick else 10
    rng = random.Random(7)
    day = date(2026, 5, 4)
    start = datetime.combine(day, dtime(), tzinfo=UTC)
    gpus = [g["id"] for h in inventory() for g in h["gpus"]]
    booked = reservations(start, 2000, rng)
    coverage = {"unrestricted": False, "timezone": "UTC",
                "gpus": {g: [[(start + timedelta(days=d, hours=8)).isoformat(),
                              (start + timedelta(days=d, hours=16)).isoformat()] for d in range(7)]
                         for g in gpus}}  # fmt: skip
    cal_client = CannedClient({"me": {"name": "alice"}, "hosts": {"hosts": inventory()},
                               "reservations": {"reservations": booked},
                               "rules/coverage": coverage,
                               "health": health(start - timedelta(days=1))})  # fmt: skip
    ov_client = CannedClient({"overview": overview_reply(start, 30, rng), "jobs": {"jobs": []}})

    def build_calendar() -> CalendarView:
        model = CalendarModel(cal_client, start=day, gpus=gpus, zone="UTC")
        model.load()
        return CalendarView(model)

    def build_overview() -> OverviewView:
        model = OverviewModel(ov_client, start=day, days=30, zone="UTC")
        model.load()
        return OverviewView(model)

    build_calendar(), build_overview()  # warm imports and widget classes
    calendar_ms = timed(build_calendar, repeat)
    overview_ms = timed(build_overview, repeat)
    cal, ov = build_calendar(), build_overview()
    assert set(cal.model.blocked) == {"gpu01:1", "gpu02:3"}, cal.model.blocked  # health read
    calendar_update_ms = timed(cal.model.load, repeat)
    overview_update_ms = timed(ov.model.load, repeat)
    result = {
        "calendar_gpus": len(gpus), "calendar_reservations": len(booked),
        "calendar_boxes": len(cal.model.boxes),
        "overview_cells": int(ov.model.matrix.size),
        "calendar_build_ms": calendar_ms, "calendar_update_ms": calendar_update_ms,
        "overview_build_ms": overview_ms, "overview_update_ms": overview_update_ms,
        "overview_64x720_build_ms": overview_ms, "repeat": repeat,
    }  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
