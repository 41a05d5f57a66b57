"""The calendar at real size: a lane per GPU, GPU names on the axis, labels that never overprint,
one host at a time, and failed or drained GPUs marked, never free (issue #48)."""

from __future__ import annotations

import itertools
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

import pytest

from jupyter_gpuhive.widgets import calendar_lanes as lanes
from jupyter_gpuhive.widgets.calendar_model import CalendarModel, blocked_by
from jupyter_gpuhive.widgets.calendar_view import CalendarView
from tests.widgets.conftest import next_monday

UTC = timezone.utc
TITLES = ["ablation", "WWWW wide capitals WWWW", "bob", "x", "llama fine-tune, 70B, 8 GPUs",
          "mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm"]  # fmt: skip
LENGTHS = [0.25, 1, 2, 5, 9, 14, 30]  # hours: from a quarter to over a day


def gpus(count: int) -> list[str]:
    """`count` GPUs, four per host, as the hosts endpoint lists them."""
    return [f"node{h:02d}:{i}" for h in range(count // 4) for i in range(4)]


def crowded_week(model: CalendarModel, owners: list[str]) -> list[dict[str, Any]]:
    """Back-to-back bookings of mixed lengths and titles on every GPU over the whole week."""
    start = datetime.combine(model.start, time(), tzinfo=UTC)
    lengths, titles, who = (itertools.cycle(x) for x in (LENGTHS, TITLES, owners))
    made = []
    for n, gpu in enumerate(model.gpus):
        at = start + timedelta(hours=n % 5)
        while at < start + timedelta(days=model.days):
            end = at + timedelta(hours=next(lengths))
            made.append({"id": len(made) + 1, "owner": next(who), "title": next(titles),
                         "gpus": [gpu], "start": at.isoformat(), "end": end.isoformat(),
                         "status": "upcoming"})  # fmt: skip
            at = end
    return made


@pytest.mark.parametrize("count", [12, 32, 64])
def test_labels_never_overlap_and_each_fits_its_box(count: int) -> None:
    model = CalendarModel(None, start=date(2027, 3, 1), gpus=gpus(count), zone="UTC")
    model.me, model.all_gpus = "ann", gpus(count)
    model.apply(crowded_week(model, ["ann", "bob", "carolyn-with-a-long-name"]), {})
    frame = model.frame(840)
    placed = model.labels(frame)
    assert len(model.boxes) > 20 * count and len(placed) > 3 * count  # crowded, and labelled
    for a, b in itertools.combinations(placed, 2):
        assert not a.overlaps(b), (a, b)
    by_box = {(b.lane, b.x0): b for b in model.boxes}
    for p in placed:
        lane = int(p.y)
        box = by_box[(lane, p.x - lanes.INSET_PX / frame.px_per_hour)]
        # Inside its own box: from INSET_PX after its left edge to no further than its right.
        assert p.left >= box.x0 * frame.px_per_hour and p.right <= box.x1 * frame.px_per_hour
        assert p.full == box.label and (p.text == box.label or p.text.endswith(lanes.ELLIPSIS))
        assert len(p.text) >= min(lanes.MIN_CHARS, len(box.label))
    # Whole titles where they fit: a 30-hour box holds 'bob: bob' in full.
    assert any(p.text == p.full for p in placed) and any(p.text != p.full for p in placed)


@pytest.mark.parametrize("count", [12, 32, 64])
def test_lanes_keep_their_height_and_the_figure_grows(count: int) -> None:
    model = CalendarModel(None, start=date(2027, 3, 1), gpus=gpus(count), zone="UTC")
    model.all_gpus = gpus(count)
    frame = model.frame(840)
    assert frame.plot_height_px / count == lanes.LANE_PX >= 2 * lanes.FONT_PX
    assert (
        frame.height_px == count * lanes.LANE_PX + lanes.TOP_PX + lanes.BOTTOM_PX + lanes.CHROME_PX
    )
    ticks = lanes.lane_ticks(model.lane_names())
    assert list(ticks.values()) == gpus(count)  # names, one per lane, not numbers
    assert list(ticks) == [i + 0.5 for i in range(count)]
    # The lane names fit the left margin; hour labels never touch each other.
    assert max(len(n) for n in ticks.values()) * lanes.CHAR_PX < frame.left_px
    hours = sorted(lanes.hour_ticks(model.days, frame))
    gaps = [(b - a) * frame.px_per_hour for a, b in itertools.pairwise(hours)]
    assert min(gaps) >= 2 * len("00") * lanes.CHAR_PX
    view = CalendarView(model)
    assert view.figure.layout.height == f"{frame.height_px}px"
    assert view.scroller.layout.max_height == f"{lanes.VISIBLE_PX}px"
    assert view.scroller.layout.overflow == "auto"
    assert view.lane_axis.tick_labels == {f"{k:g}": v for k, v in ticks.items()}


def test_fit_cuts_with_an_ellipsis() -> None:
    assert lanes.fit("bob: ablation", 20) == "bob: ablation"
    assert lanes.fit("bob: ablation", 8) == "bob: ab…"
    assert lanes.fit("bob: ablation", 6) == "bob:…"  # no space before the ellipsis
    assert lanes.fit("bob: ablation", 0) == ""


def test_health_answer_names_failed_and_drained_gpus() -> None:
    health = [{"gpu": "a:0", "state": "ok", "drained": False},
              {"gpu": "a:1", "state": "failed", "drained": False},
              {"gpu": "a:2", "state": "degraded", "drained": True},
              {"gpu": "a:3", "state": "degraded", "drained": False}]  # fmt: skip
    assert blocked_by(health) == {"a:1": "failed", "a:2": "drained"}


def test_a_drained_gpu_is_marked_and_never_free_and_one_host_can_be_shown(as_user: Any) -> None:
    boss = as_user("boss")
    boss.request("POST", "health/drain", body={"gpu": "gpu06:2", "reason": "fan"})
    try:
        cal = CalendarModel(as_user("alice"), start=next_monday(), zone="UTC")
        cal.load()
        view = CalendarView(cal)
        assert len(cal.gpus) == 64 and cal.blocked == {"gpu06:2": "drained"}
        lane = cal.gpus.index("gpu06:2")
        assert view.lane_axis.tick_labels[f"{lane + 0.5:g}"] == "gpu06:2 · drained"
        band = [(s.lane, s.x0, s.x1) for s in cal.unbookable]
        assert band == [(lane, 0.0, cal.hours)]  # the whole week, grey and hatched
        assert len(view.allowed.x) == len(cal.allowed) + 1
        # A brush over its lane and the next books only the next, and says why.
        draft = cal.select(30, 32, lane + 0.2, lane + 1.8)
        assert draft is not None and draft.gpus == ["gpu06:3"]
        assert "gpu06:2 (drained)" in cal.message
        assert cal.select(30, 32, lane + 0.2, lane + 0.8) is None
        # One host at a time, from the host dropdown.
        assert cal.hosts[:2] == ["gpu01", "gpu02"] and len(cal.hosts) == 16
        view.host.value = "gpu06"
        assert cal.gpus == ["gpu06:0", "gpu06:1", "gpu06:2", "gpu06:3"]
        assert cal.unbookable[0].lane == 2
        assert list(view.lane_axis.tick_labels.values())[2] == "gpu06:2 · drained"
        assert view.host.value == "gpu06"
        view.host.value = ""  # All hosts
        assert len(cal.gpus) == 64
    finally:
        boss.request("POST", "health/drain", body={"gpu": "gpu06:2", "drain": False})
