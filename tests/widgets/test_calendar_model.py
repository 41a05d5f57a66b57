"""CalendarModel against a real server: selection, dialog requests, errors, own boxes."""

from __future__ import annotations

import itertools
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from jupyter_gpuhive.widgets import palette
from jupyter_gpuhive.widgets.calendar_model import CalendarModel
from jupyter_gpuhive.widgets.calendar_view import CalendarView
from tests.widgets.conftest import next_monday

UTC = timezone.utc


def at(day: Any, hour: float) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC) + timedelta(hours=hour)


@pytest.fixture
def cal(as_user: Any) -> CalendarModel:
    model = CalendarModel(as_user("alice"), start=next_monday(), gpus=["gpu02:0", "gpu02:1"],
                          zone="UTC")  # fmt: skip
    model.load()
    return model


def test_brush_becomes_the_exact_post_the_dialog_sends(cal: CalendarModel) -> None:
    assert cal.me == "alice" and cal.hours == 7 * 24 and len(cal.gpus) == 2  # a lane per GPU
    assert len(cal.all_gpus) == 64
    # Tuesday (x 24-48) over both lanes, 09:07 → 11:52 snapped to quarters.
    draft = cal.select(24 + 9.12, 24 + 11.87, 0.2, 1.8)
    assert draft is not None and draft.gpus == ["gpu02:0", "gpu02:1"]
    tuesday = cal.start + timedelta(days=1)
    assert (draft.start, draft.end) == (at(tuesday, 9), at(tuesday, 11.75))
    assert draft.start.tzinfo is not None  # what DatetimePicker needs
    cal.edit(title="training", description="resnet")
    method, path, body = cal.draft.request()
    assert (method, path) == ("POST", "reservations")
    assert body == {
        "title": "training", "description": "resnet", "gpus": ["gpu02:0", "gpu02:1"],
        "start": at(tuesday, 9).isoformat(), "end": at(tuesday, 11.75).isoformat(),
    }  # fmt: skip
    done = cal.submit()
    assert done is not None and cal.draft is None and cal.error == ""
    assert "Reserved gpu02:0, gpu02:1" in cal.message
    mine = [b for b in cal.boxes if b.reservation_id == done["id"]]
    assert [b.lane for b in mine] == [0, 1]
    assert all(b.mine and b.colour == palette.MINE for b in mine)
    assert (mine[0].x0, mine[0].x1) == (24 + 9.0, 24 + 11.75)
    assert mine[0].label == "alice: training"


def test_single_column_brush_takes_one_gpu(cal: CalendarModel) -> None:
    draft = cal.select(72 + 14, 72 + 13, 1.9, 1.1)  # Thursday, second lane, brushed backwards
    assert draft is not None and draft.gpus == ["gpu02:1"]
    assert draft.start.hour == 13 and draft.end.hour == 14


def test_conflict_is_shown_in_the_dialog_in_words(cal: CalendarModel, as_user: Any) -> None:
    wednesday = cal.start + timedelta(days=2)
    bob = as_user("bob")
    taken = bob.reserve(title="bob's run", gpus=["gpu02:0"], start=at(wednesday, 10).isoformat(),
                        end=at(wednesday, 12).isoformat())  # fmt: skip
    cal.load()
    bobs = [b for b in cal.boxes if b.reservation_id == taken["id"]]
    assert len(bobs) == 1 and not bobs[0].mine
    assert bobs[0].colour == palette.user_colour("bob") != palette.MINE
    assert (bobs[0].lane, bobs[0].x0, bobs[0].x1) == (0, 48 + 10.0, 48 + 12.0)
    assert bobs[0].label == "bob: bob's run"
    cal.select(48 + 11, 48 + 13, 0.1, 0.9)
    cal.edit(title="clash")
    assert cal.submit() is None
    assert cal.draft is not None  # the dialog stays open
    assert cal.error.startswith("Could not reserve. Conflict: ")
    assert "not free" in cal.error
    # Clicking someone else's box opens no dialog, only says whose it is.
    assert cal.click(48 + 11, 0.5) is None
    assert cal.message.startswith("bob: bob's run")


def test_empty_title_and_unchanged_edit_are_refused_locally(cal: CalendarModel) -> None:
    cal.select(6 * 24 + 1, 6 * 24 + 2, 0.2, 0.8)
    assert cal.submit() is None and cal.error == "Give the reservation a title."
    cal.edit(title="sunday")
    done = cal.submit()
    assert done is not None
    cal.open(done["id"])
    assert cal.submit() is None and cal.error == "Nothing was changed."


def test_click_own_box_then_edit_and_cancel(cal: CalendarModel, as_user: Any) -> None:
    friday = cal.start + timedelta(days=4)
    cal.select(96 + 6, 96 + 8, 0.1, 0.9)
    cal.edit(title="mine")
    made = cal.submit()
    assert made is not None
    draft = cal.click(96 + 7, 0.5)
    assert draft is not None and draft.reservation_id == made["id"]
    assert draft.title == "mine" and draft.status == "upcoming"
    cal.edit(end=at(friday, 9), title="longer")
    method, path, body = cal.draft.request()
    assert (method, path) == ("PATCH", f"reservations/{made['id']}")
    assert body == {"title": "longer", "end": at(friday, 9).isoformat()}  # only what changed
    assert cal.submit() is not None
    box = next(b for b in cal.boxes if b.reservation_id == made["id"])
    assert (box.x0, box.x1, box.title) == (96 + 6.0, 96 + 9.0, "longer")
    cal.open(made["id"])
    assert cal.end_or_cancel() is not None
    assert cal.message == f"Reservation {made['id']} cancelled."
    assert all(b.reservation_id != made["id"] for b in cal.boxes)
    # A second cancel (e.g. from a stale dialog) is a conflict, shown in words.
    stale = CalendarModel(as_user("alice"), start=cal.start, gpus=cal.gpus, zone="UTC")
    stale.load()
    stale.reservations[made["id"]] = {**made, "status": "upcoming"}
    stale.open(made["id"])
    assert stale.end_or_cancel() is None
    assert (
        stale.error
        == f"Could not cancel the reservation. Conflict: Reservation {made['id']} is already cancelled."
    )


def test_running_own_reservation_ends_early(as_user: Any) -> None:
    alice = as_user("alice")
    now = datetime.now(UTC)
    made = alice.reserve(title="now", gpus=["gpu03:2"], start=now.isoformat(), duration="2h")
    # The model's clock is this test's: its today and now-line cannot move on at midnight.
    cal = CalendarModel(alice, gpus=["gpu03:2"], zone="UTC", now=lambda: now)
    cal.load()
    assert cal.start == now.date()
    line = cal.now_line()
    assert line is not None and line[1] == [0.0, 1.0]  # across the one lane
    hours = (now - at(now.date(), 0)).total_seconds() / 3600
    assert line[0] == [pytest.approx(hours), pytest.approx(hours)]
    draft = cal.open(made["id"])
    assert draft is not None and draft.status == "active"
    done = cal.end_or_cancel()
    assert done is not None and "ended early" in cal.message


def test_allowed_windows_are_painted_and_forbidden_times_explained(as_user: Any) -> None:
    carol = CalendarModel(as_user("carol"), start=next_monday(), gpus=["gpu01:0", "gpu02:0"],
                          zone="UTC")  # fmt: skip
    carol.load()
    assert carol.unrestricted is False
    office = [(s.x0, s.x1) for s in carol.allowed if s.lane == 0]  # gpu01:0
    assert office == [(24 * d + 8.0, 24 * d + 16.0) for d in range(5)]
    anytime = [s for s in carol.allowed if s.lane == 1]
    assert (anytime[0].x0, anytime[-1].x1) == (0.0, 7 * 24.0)
    assert all(a.x1 == b.x0 for a, b in itertools.pairwise(anytime))
    carol.select(120 + 18, 120 + 20, 0.2, 0.8)  # Saturday evening on gpu01:0
    carol.edit(title="weekend")
    assert carol.submit() is None
    assert carol.error.startswith("Could not reserve. Not allowed: "), carol.error
    boss = CalendarModel(as_user("boss"), start=next_monday(), gpus=["gpu01:0"], zone="UTC")
    boss.load()
    assert boss.unrestricted and (boss.allowed[0].x0, boss.allowed[-1].x1) == (0.0, 168.0)


def test_reservation_across_midnight_is_one_box_over_the_day_line(as_user: Any) -> None:
    monday = next_monday(2)
    bob = as_user("bob")
    bob.reserve(title="overnight", gpus=["gpu04:0"], start=at(monday, 22).isoformat(),
                end=at(monday, 26).isoformat())  # fmt: skip
    cal = CalendarModel(as_user("alice"), start=monday, gpus=["gpu04:0"], zone="UTC")
    cal.load()
    assert [(b.lane, b.x0, b.x1) for b in cal.boxes] == [(0, 22.0, 26.0)]
    # Shown in another zone the same booking moves on the clock.
    warsaw = CalendarModel(as_user("alice"), start=monday, gpus=["gpu04:0"], zone="Europe/Warsaw")
    warsaw.load()
    local = at(monday, 22).astimezone(warsaw.zone)
    first = warsaw.boxes[0]
    assert first.x0 == (local.date() - monday).days * 24 + local.hour


def test_view_draws_the_model(cal: CalendarModel, as_user: Any) -> None:
    view = CalendarView(cal)
    cal.select(3, 20, 0.1, 0.9)  # Monday 03:00-20:00: long enough for part of its label
    assert view.dialog.layout.display == "flex"
    assert view.start.value == cal.draft.start and view.start.value.tzinfo is not None
    view.title.value = "from the dialog"
    view._submit()
    assert cal.draft is None and view.dialog.layout.display == "none"
    assert len(np.atleast_2d(view.boxes.x)) == len(cal.boxes) >= 1  # one box: a 1-D array
    assert list(view.labels.text) == [p.text for p in cal.labels(cal.frame(view.width))]
    assert [t[:9] for t in view.labels.text] == ["alice: fr"]  # cut to its box, and
    assert "alice: from the dialog" in list(view.boxes.labels)  # whole in its tooltip
    assert view.top_axis.tick_labels["12"] == cal.start.strftime("%a %d %b")
    # GPU names on the lane axis, one per lane (not numbers).
    assert view.lane_axis.tick_labels == {"0.5": "gpu02:0", "1.5": "gpu02:1"}
    assert view.gpu_picker.value == ("gpu02:0", "gpu02:1")
    view.gpu_picker.value = ("gpu02:1",)
    assert cal.gpus == ["gpu02:1"] and view.lane_axis.tick_labels == {"0.5": "gpu02:1"}


def test_brush_over_two_days_runs_from_its_left_to_its_right_edge(cal: CalendarModel) -> None:
    # gpu02:0's lane from Tuesday 09:00 to Wednesday 18:00.
    draft = cal.select(24 + 9, 48 + 18, 0.1, 0.9)
    tuesday = cal.start + timedelta(days=1)
    assert draft is not None and draft.gpus == ["gpu02:0"]
    assert (draft.start, draft.end) == (at(tuesday, 9), at(tuesday, 24 + 18))
    cal.edit(start=at(tuesday, 18), end=at(tuesday, 33))
    assert cal.draft.request()[2]["end"] == at(tuesday, 33).isoformat()


def test_boxes_too_short_for_a_label_keep_only_their_tooltip(as_user: Any) -> None:
    monday = next_monday(3)
    bob = as_user("bob")
    # At a week's scale (about 5 px an hour) 10 and 20 minutes hold no text; 12 hours do.
    for k, minutes in enumerate((10, 20, 720)):
        bob.reserve(title=f"b{k}", gpus=["gpu05:1"], start=at(monday, 9 + 2 * k).isoformat(),
                    duration=f"{minutes}m")  # fmt: skip
    cal = CalendarModel(as_user("alice"), start=monday, gpus=["gpu05:1"], zone="UTC")
    cal.load()
    view = CalendarView(cal)
    assert len(cal.boxes) == 3 and len(view.boxes.x) == 3
    assert list(view.labels.text) == ["bob: b2"]
    assert sorted(view.handles.names) == ["bob: b0", "bob: b1", "bob: b2"]


def _booked(rid: int, start: str, end: str) -> dict[str, Any]:
    return {"id": rid, "owner": "bob", "title": "t", "gpus": ["gpu02:0"], "start": start,
            "end": end, "status": "upcoming", "cancelled_at": None}  # fmt: skip


@pytest.mark.parametrize(
    ("day", "start", "end", "segments"),
    [
        # Sun 28 Mar 2027: 02:00 CET becomes 03:00 CEST. 01:30 CET → 04:30 CEST, 23:00 → 01:00.
        (date(2027, 3, 28), "2027-03-28T00:30:00+00:00", "2027-03-28T02:30:00+00:00",
         (1.5, 4.5)),
        (date(2027, 3, 28), "2027-03-28T21:00:00+00:00", "2027-03-28T23:00:00+00:00",
         (23.0, 25.0)),
        # Sun 31 Oct 2027: 03:00 CEST becomes 02:00 CET. 10:00 → 12:00 CET.
        (date(2027, 10, 31), "2027-10-31T09:00:00+00:00", "2027-10-31T11:00:00+00:00",
         (10.0, 12.0)),
    ],
)  # fmt: skip
def test_boxes_on_a_dst_day_sit_at_their_local_clock_times(
    day: date, start: str, end: str, segments: tuple[float, float]
) -> None:
    # No server: the model draws API replies as they come. Its y axis is the local clock, as is
    # the brush, so a box lands where it was brushed, also on the day the clocks change.
    cal = CalendarModel(None, start=day, days=2, gpus=["gpu02:0"], zone="Europe/Warsaw")
    cal.me, cal.all_gpus = "alice", ["gpu02:0"]
    cal.apply([_booked(1, start, end)], {"unrestricted": True, "gpus": {}})
    assert [(b.x0, b.x1) for b in cal.boxes] == [segments]
    draft = cal.select(*segments, 0.5, 0.5)
    assert draft is not None and draft.start.tzinfo is not None
    assert draft.start == datetime.fromisoformat(start)
    assert draft.end == datetime.fromisoformat(end)
    noon = datetime.combine(day, time(12), tzinfo=cal.zone)
    clock = CalendarModel(None, start=day, gpus=["gpu02:0"], zone="Europe/Warsaw",
                          now=lambda: noon)  # fmt: skip
    assert clock.now_line() == ([12.0, 12.0], [0.0, 1.0])  # the now-line on the same clock
