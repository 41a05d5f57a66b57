"""The calendar widget marks a booking that waits for approval (#46): its box says so."""

from __future__ import annotations

from jupyter_gpuhive.widgets.calendar_lanes import status_of
from jupyter_gpuhive.widgets.calendar_model import Box


def test_a_tentative_booking_is_labelled_as_waiting_for_approval() -> None:
    waiting = {"status": "upcoming", "tentative": True}
    confirmed = {"status": "upcoming", "tentative": False}
    assert status_of(waiting) == "tentative"
    assert status_of(confirmed) == "upcoming" and status_of({"status": "active"}) == "active"
    box = Box(7, "gpu1:0", 0, 0.0, 2.0, 0.1, 0.9, "alice", "big run", False, "#ccc",
              status_of(waiting))  # fmt: skip
    assert box.label == "alice: big run (tentative: waits for approval)"
    plain = Box(8, "gpu1:0", 0, 0.0, 2.0, 0.1, 0.9, "alice", "run", False, "#ccc", "upcoming")
    assert plain.label == "alice: run"
