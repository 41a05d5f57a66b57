"""The finder on the calendar against a real server: highlight the earliest slots, book one."""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone
from typing import Any

from jupyter_gpuhive.widgets.calendar_model import CalendarModel
from jupyter_gpuhive.widgets.calendar_view import CalendarView
from tests.widgets.conftest import next_monday

UTC = timezone.utc


def test_candidates_are_highlighted_and_one_click_books(as_user: Any) -> None:
    monday = next_monday(3)
    start = datetime.combine(monday, time(), tzinfo=UTC)
    bob = as_user("bob")
    held = bob.request("POST", "reservations", body={
        "title": "bob's", "gpus": [f"gpu{h:02d}:{i}" for h in range(2, 17) for i in range(4)],
        "start": (start + timedelta(hours=3)).isoformat(), "duration": "1d"})  # fmt: skip
    cal = CalendarModel(as_user("carol"), start=monday, gpus=["gpu05:0", "gpu05:1", "gpu05:2"],
                        zone="UTC", now=lambda: start + timedelta(hours=2))  # fmt: skip
    cal.load()
    view = CalendarView(cal)
    panel = view.candidates
    assert panel.form in view.widget.children
    panel.count.value, panel.duration.value, panel.same_host.value = 3, "2h", True
    slots = panel.find()
    # everything but gpu01 (office hours only) is taken from 03:00 for a day: the first slot is
    # on gpu01 in office hours or right after bob's day, whichever comes first
    first = datetime.fromisoformat(slots[0]["start"])
    assert first >= start + timedelta(hours=2)
    assert "slot(s) found" in cal.message
    on_screen = [n for n, _ in panel.state.spans]
    assert len(view.candidates.marks.x) == len(panel.state.spans)
    if on_screen:  # a slot on the GPUs shown is drawn and picks by a click on its handle
        panel._clicked(None, {"data": {"index": 0}})
        assert cal.draft is not None and cal.draft.gpus == slots[on_screen[0]]["gpus"]
    panel.state.pick(0)
    assert view.dialog.layout.display == "flex"
    assert cal.draft.gpus == slots[0]["gpus"] and cal.draft.start == first
    made = cal.submit()
    assert made is not None and made["gpus"] == slots[0]["gpus"], cal.error
    as_user("carol").request("DELETE", f"reservations/{made['id']}")
    bob.request("DELETE", f"reservations/{held['id']}")


def test_bad_request_is_said_in_words(as_user: Any) -> None:
    cal = CalendarModel(as_user("carol"), start=next_monday(), gpus=["gpu03:0"], zone="UTC")
    cal.load()
    view = CalendarView(cal)
    assert view.candidates.state.find(2, "soon") == []
    assert "duration" in cal.message.lower()
