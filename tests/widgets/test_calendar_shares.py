"""The calendar shows a shared GPU's lane with its shares (#44): each share is its part of the
lane, shares held at once are stacked, not drawn over each other, and say their part; the
overview grid colours slots whose shares leave room apart."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from jupyter_gpuhive.widgets import calendar_lanes as lanes
from jupyter_gpuhive.widgets.calendar_model import PAD, CalendarModel
from jupyter_gpuhive.widgets.overview_model import FREE, OTHERS, SHARED, OverviewModel

UTC = timezone.utc


def booking(rid: int, owner: str, gpu: str, start: datetime, hours: float,
            share: float = 1.0) -> dict[str, Any]:  # fmt: skip
    end = start + timedelta(hours=hours)
    return {"id": rid, "owner": owner, "title": "nb", "gpus": [gpu], "start": start.isoformat(),
            "end": end.isoformat(), "status": "upcoming", "share": share}  # fmt: skip


def test_shares_are_stacked_parts_of_their_lane() -> None:
    model = CalendarModel(None, start=date(2027, 3, 1), gpus=["big:0", "big:1"], zone="UTC")
    t = datetime.combine(model.start, time(9), tzinfo=UTC)
    model.apply(
        [
            booking(1, "ann", "big:0", t, 4, 0.25),
            booking(2, "bob", "big:0", t + timedelta(hours=1), 2, 0.5),
            booking(3, "cy", "big:0", t + timedelta(hours=2), 4, 0.25),
            booking(4, "dee", "big:1", t, 4),  # a whole GPU: the whole lane, as before
        ],
        {},
    )
    boxes = {b.reservation_id: b for b in model.boxes}
    inner = 1 - 2 * PAD
    for rid, part in ((1, 0.25), (2, 0.5), (3, 0.25)):
        box = boxes[rid]
        assert abs((box.y1 - box.y0) - part * inner) < 1e-9
        assert box.y0 >= PAD - 1e-9 and box.y1 <= 1 - PAD + 1e-9  # inside lane 0
        assert f"{part:g} GPU" in box.label
    # held at the same time: never drawn over each other
    for a, b in ((1, 2), (1, 3), (2, 3)):
        first, second = boxes[a], boxes[b]
        if first.x0 < second.x1 and second.x0 < first.x1:
            assert first.y1 <= second.y0 + 1e-9 or second.y1 <= first.y0 + 1e-9, (a, b)
    whole = boxes[4]
    assert (whole.y0, whole.y1) == (1 + PAD, 2 - PAD) and "GPU" not in whole.label
    # a click on a share opens that share
    assert (
        model.box_at((boxes[2].x0 + boxes[2].x1) / 2, (boxes[2].y0 + boxes[2].y1) / 2) == boxes[2]
    )


def test_share_bands_reuse_the_room_a_share_left() -> None:
    # a half from 0 to 4, a quarter from 0 to 2, then a half from 2 to 4 in the quarter's room
    tops = lanes.share_bands([(0, 4, 0.5), (0, 2, 0.25), (2, 4, 0.5)])
    assert tops == [0.0, 0.5, 0.5]
    assert lanes.share_bands([(0, 1, 0.25), (1, 2, 0.25)]) == [0.0, 0.0]  # back to back


def test_the_overview_grid_colours_shares_that_leave_room() -> None:
    model = OverviewModel(None, start=date(2027, 3, 1), days=1, slot="1h", zone="UTC")
    model.apply({"start": "2027-03-01T00:00:00+00:00", "slot_seconds": 3600, "slots": 4,
                 "gpus": [{"id": "big:0", "host": "big", "index": 0, "states": "ossf",
                           "cells": [1, 1, 2, None]}]})  # fmt: skip
    assert model.matrix.tolist() == [[OTHERS, SHARED, SHARED, FREE]]


def test_a_share_is_labelled_in_its_own_band_never_over_another_share() -> None:
    # Before, every label sat in the middle of its lane: the first share's ('ann', a quarter at
    # the lane's top) was drawn over the half share below it, and the half had none.
    model = CalendarModel(None, start=date(2027, 3, 1), gpus=["big:0", "big:1"], zone="UTC")
    t = datetime.combine(model.start, time(9), tzinfo=UTC)
    model.apply(
        [
            booking(1, "ann", "big:0", t, 30, 0.25),
            booking(2, "bob", "big:0", t, 30, 0.5),
            booking(3, "dee", "big:1", t, 30),  # a whole GPU: labelled mid-lane, as before
        ],
        {},
    )
    frame = model.frame(840)
    placed = {p.full: p for p in model.labels(frame)}
    boxes = {b.reservation_id: b for b in model.boxes}
    half, quarter, whole = boxes[2], boxes[1], boxes[3]
    # The half share's label lies in the half's band; the quarter (4.8 px high) has none:
    # its tooltip says whose it is.
    assert set(placed) == {half.label, whole.label}
    label = placed[half.label]
    # (the 10 px font in a 9.6 px band: within half a pixel of it)
    assert (
        half.y0 * lanes.LANE_PX - 0.5 <= label.top and label.bottom <= half.y1 * lanes.LANE_PX + 0.5
    )
    assert label.top >= quarter.y1 * lanes.LANE_PX - 0.5  # below the quarter's band
    assert half.y0 < label.y < half.y1
    assert placed[whole.label].y == 1.5 + lanes.FONT_PX * 0.35 / lanes.LANE_PX
