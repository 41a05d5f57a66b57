"""The calendar's geometry at any size: a lane per GPU, the figure's pixels, which labels fit.

Pure arithmetic, no widget: the time runs along x in hours from the first shown day's local
midnight (day d, hour h → d * 24 + h), each GPU has a lane along y (lane i spans i..i+1, drawn
top to bottom). A lane is never thinner than LANE_PX: the figure grows with the lanes and its
box scrolls. A box's label is its title cut to the characters its box's width holds, so no
two drawn labels ever overlap; the full title is the box's tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

LANE_PX = 24  # the least height of a GPU's lane
FONT_PX = 10  # the labels' font size
CHAR_PX = 6.5  # the most a character of that font takes on average (DejaVu/Liberation Sans)
INSET_PX = 4  # a label starts this far inside its box, and ends this far before its end
MIN_CHARS = 3  # fewer than this: no label (the tooltip has it)
# A box thinner than this has no label (the tooltip has it): a half share of a GPU, 0.4 of
# LANE_PX high, has one; a quarter share has none.
MIN_BAND_PX = 9
TOP_PX, BOTTOM_PX, RIGHT_PX = 40, 36, 12
CHROME_PX = 12  # the figure's widget keeps this much of its height for itself (measured)
VISIBLE_PX = 720  # a taller figure scrolls in a box this high
ELLIPSIS = "…"


@dataclass(frozen=True)
class Frame:
    """The figure's pixels for some lanes over some hours."""

    lanes: int
    hours: float
    width_px: int
    left_px: int  # the left margin: room for the longest lane name

    @property
    def plot_width_px(self) -> float:
        return float(self.width_px - self.left_px - RIGHT_PX)

    @property
    def plot_height_px(self) -> float:
        return float(max(1, self.lanes) * LANE_PX)

    @property
    def height_px(self) -> int:
        return int(self.plot_height_px) + TOP_PX + BOTTOM_PX + CHROME_PX

    @property
    def px_per_hour(self) -> float:
        return self.plot_width_px / self.hours

    def margins(self) -> dict[str, int]:
        return {"top": TOP_PX, "bottom": BOTTOM_PX, "left": self.left_px, "right": RIGHT_PX}


def frame_for(lane_names: Sequence[str], hours: float, width_px: int) -> Frame:
    """A frame whose left margin holds the longest lane name."""
    longest = max((len(n) for n in lane_names), default=4)
    return Frame(len(lane_names), hours, width_px, int(longest * CHAR_PX) + 16)


def share_bands(shares: Sequence[tuple[float, float, float]]) -> list[float]:
    """Where each share (x0, x1, its part of the GPU), in order of start, is drawn in its
    GPU's lane: its top, in parts of the lane from the lane's top. Shares held at the same
    time are stacked, never drawn over each other while their parts leave room (they add up
    to at most one GPU at any instant); the lowest place that fits is taken."""
    eps = 1e-9
    placed: list[tuple[float, float, float, float]] = []  # x0, x1, top, bottom
    tops = []
    for x0, x1, part in shares:
        near = [(t, b) for a0, a1, t, b in placed if a0 < x1 and x0 < a1]
        top = next(
            (
                t
                for t in sorted({0.0, *(b for _, b in near)})
                if t + part <= 1 + eps and all(not (t < b - eps and u < t + part - eps)
                                                for u, b in near)
            ),
            0.0,
        )  # fmt: skip
        placed.append((x0, x1, top, top + part))
        tops.append(top)
    return tops


@dataclass(frozen=True)
class Placed:
    """A label as drawn: its text, its anchor in data units, its box in plot pixels."""

    text: str
    full: str
    x: float
    y: float
    left: float
    right: float
    top: float
    bottom: float

    def overlaps(self, other: Placed) -> bool:
        return (
            self.left < other.right
            and other.left < self.right
            and self.top < other.bottom
            and other.top < self.bottom
        )


def fit(text: str, chars: int) -> str:
    """`text` cut to `chars` characters, the last one an ellipsis when cut."""
    if len(text) <= chars:
        return text
    return text[: max(0, chars - 1)].rstrip() + ELLIPSIS if chars > 0 else ""


def chars_in(x0: float, x1: float, frame: Frame) -> int:
    """How many label characters a box from x0 to x1 hours holds."""
    room = (x1 - x0) * frame.px_per_hour - 2 * INSET_PX
    return max(0, math.floor(room / CHAR_PX))


def place(
    boxes: Sequence[tuple[float, float, int, str] | tuple[float, float, int, str, float, float]],
    frame: Frame,
) -> list[Placed]:
    """Labels for (x0, x1, lane, text) boxes, or (x0, x1, lane, text, y0, y1) for a box that is
    a band of its lane (a share, #44): each cut to its box, none over another.

    A label is drawn in the middle of its box: a share's in its band, not the lane's middle,
    where it would lie over another share. Boxes too narrow for MIN_CHARS, or too thin for a
    label (MIN_BAND_PX), get none; a label that would still touch an earlier one in its lane
    (boxes that overlap in time) is left out.
    """
    placed: list[Placed] = []
    in_lane: dict[int, list[Placed]] = {}
    for box in sorted(boxes, key=lambda b: (b[2], b[0])):
        x0, x1, lane, text = box[:4]
        y0, y1 = (box[4], box[5]) if len(box) == 6 else (lane, lane + 1)
        chars = chars_in(x0, x1, frame)
        if chars < min(MIN_CHARS, len(text)) or not text or (y1 - y0) * LANE_PX < MIN_BAND_PX:
            continue
        shown = fit(text, chars)
        left = x0 * frame.px_per_hour + INSET_PX
        middle = (y0 + y1) / 2
        # The baseline a third of the font below the box's middle centres lowercase text.
        y = middle + (FONT_PX * 0.35) / LANE_PX
        label = Placed(shown, text, x0 + INSET_PX / frame.px_per_hour, y, left,
                       left + len(shown) * CHAR_PX, middle * LANE_PX - FONT_PX / 2,
                       middle * LANE_PX + FONT_PX / 2)  # fmt: skip
        apart = replace(label, left=label.left - INSET_PX)  # a gap after the one before
        if any(apart.overlaps(other) for other in in_lane.get(lane, ())):
            continue
        in_lane.setdefault(lane, []).append(label)
        placed.append(label)
    return placed


def lane_ticks(names: Sequence[str]) -> dict[float, str]:
    """The lane axis' labels, at each lane's middle."""
    return {i + 0.5: name for i, name in enumerate(names)}


def day_ticks(dates: Sequence[date]) -> dict[float, str]:
    """The top axis' labels, at each day's noon."""
    return {d * 24 + 12.0: day.strftime("%a %d %b") for d, day in enumerate(dates)}


def hour_ticks(days: int, frame: Frame) -> dict[float, str]:
    """The bottom axis' labels: hours of the day, as many as fit without touching."""
    step = next((s for s in (3, 6, 12, 24) if s * frame.px_per_hour >= 5 * CHAR_PX), 24)
    return {float(h): f"{h % 24:02d}" for h in range(0, days * 24 + 1, step)}


def status_of(reservation: dict[str, Any]) -> str:
    """A box's status: the reservation's, or 'tentative' while it waits for approval (#46)."""
    return "tentative" if reservation.get("tentative") else str(reservation.get("status", ""))
