"""CalendarView: the bqplot figure and the reservation dialog on top of a CalendarModel."""

from __future__ import annotations

from datetime import date
from typing import Any

import bqplot as bq
import ipywidgets as w

from ..model import ReservationStatus
from . import calendar_lanes as lanes
from . import palette
from .calendar_candidates import CandidatesPanel
from .calendar_model import Box, CalendarModel, Span
from .display import Shown

# The labels are drawn over their boxes: they let the mouse through, so hovering a box anywhere,
# its label too, shows the box's tooltip (its whole title). Only in "Pick a box": while
# "Select time" is on, the brush lies over every mark and takes the mouse for dragging.
LABELS_CSS = "<style>.gpuhive-calendar text.label { pointer-events: none; }</style>"
MODE_TIPS = ["Drag over free time to book it",
             "Hover a box for its whole title; click one of yours to change it"]  # fmt: skip


def outlines(shapes: list[Box] | list[Span]) -> tuple[list[list[float]], list[list[float]]]:
    """Closed rectangles as the 2-D x/y arrays of one multi-line Lines mark."""
    xs = [[s.x0, s.x1, s.x1, s.x0, s.x0] for s in shapes]
    ys = [[s.y0, s.y0, s.y1, s.y1, s.y0] for s in shapes]
    return xs, ys


def _fill(mark: bq.Lines, xs: list[list[float]], ys: list[list[float]], colours: list[str],
          strokes: list[str]) -> None:  # fmt: skip
    with mark.hold_sync():
        if xs:
            mark.x, mark.y = xs, ys
            mark.fill_colors, mark.colors = colours, strokes
        else:
            mark.x, mark.y = [[0.0, 0.0]], [[0.0, 0.0]]
        mark.visible = bool(xs)


def hatch(spans: list[Span], every: float = 6.0) -> tuple[list[list[float]], list[list[float]]]:
    """Diagonal strokes across each span, one per `every` hours (a failed or drained lane)."""
    xs, ys = [], []
    for s in spans:
        x = s.x0
        while x < s.x1:
            xs.append([x, min(s.x1, x + every / 2)])
            ys.append([s.y1, s.y0])
            x += every
    return xs, ys


def ticks(axis: bq.Axis, labels: dict[float, str]) -> None:
    """Put tick labels at exactly these places."""
    with axis.hold_sync():
        axis.tick_values = list(labels) or [0.5]
        axis.tick_labels = {f"{k:g}": v for k, v in labels.items()}


class CalendarView(Shown):
    """Week navigation, host and GPU choice, the figure (brush to book, click own boxes), a dialog.

    A lane per GPU, never thinner than calendar_lanes.LANE_PX: the figure grows with the GPUs
    shown and scrolls in its box; its width is fixed (`width` px) so labels fit what they name.
    """

    def __init__(self, model: CalendarModel, width: int = 840) -> None:
        self.model = model
        self.width = width
        m = model
        self.x = bq.LinearScale(min=0.0, max=m.hours)
        self.y = bq.LinearScale(min=0.0, max=1.0, reverse=True)
        scales = {"x": self.x, "y": self.y}
        self.allowed = bq.Lines(scales=scales, fill="inside", opacities=[0.0], stroke_width=0)
        self.grid = bq.Lines(scales=scales, colors=["#bbbbbb"], stroke_width=1)
        # Hovering a box shows its whole label (the drawn one is cut to the box).
        full = bq.Tooltip(fields=["name"], labels=["reservation"])
        self.boxes = bq.Lines(scales=scales, fill="inside", stroke_width=1.5, tooltip=full)
        # Label's size is `default_size` (px; 16 and bold by default, too big for the boxes).
        self.labels = bq.Label(
            scales=scales, default_size=10, font_weight="normal", align="start", colors=["#222"]
        )
        self.handles = bq.Scatter(
            scales=scales, marker="square", default_size=40, stroke="#333",
            tooltip=bq.Tooltip(fields=["name"], labels=["reservation"]),
        )  # fmt: skip
        self.handles.on_element_click(self._handle_clicked)
        self.now = bq.Lines(
            scales=scales, colors=[palette.NOW], stroke_width=2, line_style="dashed"
        )
        self.brush = bq.interacts.BrushSelector(x_scale=self.x, y_scale=self.y, color="steelblue")
        self.brush.observe(self._brushed, "brushing")
        self.top_axis = bq.Axis(scale=self.x, side="top", grid_lines="none", tick_values=[12])
        self.bottom_axis = bq.Axis(scale=self.x, grid_lines="none", tick_values=[0],
                                   label="time of day")  # fmt: skip
        self.lane_axis = bq.Axis(scale=self.y, orientation="vertical", grid_lines="none",
                                 tick_values=[0.5])  # fmt: skip
        self.figure = bq.Figure(
            marks=[self.allowed, self.grid, self.boxes, self.labels, self.handles, self.now],
            axes=[self.top_axis, self.bottom_axis, self.lane_axis],
            interaction=self.brush,
            padding_y=0.0,  # lanes at exactly LANE_PX (the default pads the range by 2.5 %)
            min_aspect_ratio=0.001,
            max_aspect_ratio=1000.0,
            layout=w.Layout(width=f"{width}px", min_width=f"{width}px"),
        )
        self.figure.add_class("gpuhive-calendar")
        # A tall figure (many GPUs) scrolls here; lanes never shrink below LANE_PX.
        self.scroller = w.Box(
            [self.figure],
            layout=w.Layout(max_height=f"{lanes.VISIBLE_PX}px", overflow="auto", width="100%"),
        )

        self.day = w.DatePicker(value=m.start, description="From", layout=w.Layout(width="220px"))
        self.day.observe(self._day_changed, "value")
        back, forward = (
            w.Button(icon="chevron-left", tooltip="Previous week"),
            w.Button(icon="chevron-right", tooltip="Next week"),
        )
        for button, days in ((back, -7), (forward, 7)):
            button.layout.width = "40px"
            button.on_click(lambda _b, d=days: self._shift(d))
        self.gpu_picker = w.SelectMultiple(rows=4, description="GPUs")
        self.gpu_picker.observe(self._gpus_changed, "value")
        self.mode = w.ToggleButtons(
            options=["Select time", "Pick a box"], value="Select time", tooltips=MODE_TIPS
        )
        self.mode.observe(self._mode_changed, "value")
        self.mine = w.Dropdown(description="Mine", layout=w.Layout(width="320px"))
        self.mine.observe(self._mine_chosen, "value")
        refresh = w.Button(icon="refresh", tooltip="Reload", layout=w.Layout(width="40px"))
        self.host = w.Dropdown(description="Host", layout=w.Layout(width="220px"))
        self.host.observe(self._host_chosen, "value")
        refresh.on_click(lambda _b: self._call(m.load))
        self.status = w.HTML()

        self.title = w.Text(description="Title")
        self.description = w.Textarea(description="Description")
        self.dialog_gpus = w.SelectMultiple(description="GPUs", rows=4)
        self.start = w.DatetimePicker(description="Start")
        self.end = w.DatetimePicker(description="End")
        self.error = w.HTML()
        self.save = w.Button(description="Reserve", button_style="primary")
        self.save.on_click(lambda _b: self._submit())
        self.stop = w.Button(description="Cancel reservation", button_style="danger")
        self.stop.on_click(lambda _b: self._call(m.end_or_cancel))
        close = w.Button(description="Close")
        close.on_click(lambda _b: m.close())
        self.heading = w.HTML()
        self.dialog = w.VBox(
            [self.heading, self.title, self.description, self.dialog_gpus, self.start, self.end,
             self.error, w.HBox([self.save, self.stop, close])],
            layout=w.Layout(border="1px solid #999", padding="6px", display="none"),
        )  # fmt: skip

        self.notice = w.HTML()
        self.widget = w.VBox(
            [self.notice, w.HBox([back, self.day, forward, self.mode, refresh]),
             w.HBox([self.host, self.gpu_picker, self.mine]), self.status, self.scroller,
             self.dialog, w.HTML(LABELS_CSS)]
        )  # fmt: skip
        m.listeners.append(self.render)
        self.render()
        self.candidates = CandidatesPanel(self)  # the finder: highlight, click to book

    # --- drawing -------------------------------------------------------------------

    def render(self) -> None:
        """Redraw everything from the model."""
        m = self.model
        frame = m.frame(self.width)
        count = max(1, len(m.gpus))
        with self.figure.hold_sync():
            self.figure.fig_margin = frame.margins()
            self.figure.layout.height = f"{frame.height_px}px"
        self.x.min, self.x.max = 0.0, m.hours
        self.y.min, self.y.max = 0.0, float(count)
        ticks(self.top_axis, lanes.day_ticks(m.dates))
        ticks(self.bottom_axis, lanes.hour_ticks(m.days, frame))
        ticks(self.lane_axis, lanes.lane_ticks(m.lane_names()))
        xs, ys = outlines(m.allowed + m.unbookable)
        fills = [palette.ALLOWED] * len(m.allowed) + [palette.UNBOOKABLE] * len(m.unbookable)
        _fill(self.allowed, xs, ys, fills, fills)
        days = [[d * 24.0, d * 24.0] for d in range(m.days + 1)]
        rows = [[0.0, m.hours] for _ in range(count + 1)]
        hx, hy = hatch(m.unbookable)
        with self.grid.hold_sync():
            self.grid.x = days + rows + hx
            self.grid.y = (
                [[0.0, float(count)]] * len(days) + [[float(i)] * 2 for i in range(count + 1)] + hy
            )
            self.grid.colors = (["#999999"] * len(days) + ["#e3e3e3"] * len(rows)
                                + [palette.UNBOOKABLE_HATCH] * len(hx))  # fmt: skip
        xs, ys = outlines(m.boxes)
        strokes = [palette.MINE_STROKE if b.mine else palette.OTHERS_STROKE for b in m.boxes]
        _fill(self.boxes, xs, ys, [b.colour for b in m.boxes], strokes)
        self.boxes.labels = [b.label for b in m.boxes] or [""]
        # Each label cut to its box (calendar_lanes.place): none is drawn over another.
        placed = m.labels(frame)
        with self.labels.hold_sync():
            self.labels.x = [p.x for p in placed] or [0.0]
            self.labels.y = [p.y for p in placed] or [0.0]
            self.labels.text = [p.text for p in placed] or [""]
            self.labels.visible = bool(placed)
        with self.handles.hold_sync():
            self.handles.x = [(b.x0 + b.x1) / 2 for b in m.boxes] or [0.0]
            self.handles.y = [(b.y0 + b.y1) / 2 for b in m.boxes] or [0.0]
            self.handles.names = [b.label for b in m.boxes] or [""]
            self.handles.colors = [b.colour for b in m.boxes] or ["white"]
            self.handles.visible = bool(m.boxes) and self.mode.value == "Pick a box"
        line = m.now_line()
        with self.now.hold_sync():
            self.now.x, self.now.y = line if line else ([0.0, 0.0], [0.0, 0.0])
            self.now.visible = line is not None
        self._render_controls()

    def _render_controls(self) -> None:
        m = self.model
        hosts = [("All hosts", "")] + [(h, h) for h in m.hosts]
        if list(self.host.options) != hosts:
            self.host.options = hosts
        shown = {g.rsplit(":", 1)[0] for g in m.gpus}
        one = next(iter(shown)) if len(shown) == 1 and len(m.hosts) > 1 else ""
        if self.host.value != one and (one or len(m.gpus) == len(m.all_gpus)):
            self.host.value = one
        if set(self.gpu_picker.options) != set(m.all_gpus):
            self.gpu_picker.options = m.all_gpus
        if tuple(self.gpu_picker.value) != tuple(m.gpus):
            self.gpu_picker.value = tuple(m.gpus)
        own = sorted(
            (r for r in m.reservations.values() if r["owner"] == m.me and r["status"] != "ended"),
            key=lambda r: r["start"],
        )
        self.mine.options = [("—", None)] + [(f"{r['id']}: {r['title']}", r["id"]) for r in own]
        self.status.value = m.message
        self.notice.value = m.notice
        d = m.draft
        self.dialog.layout.display = "none" if d is None else "flex"
        if d is None:
            if self.brush.selected is not None:  # booked or closed: no stale selection on top
                self.brush.reset()
                self.brush.selected = None
            return
        self.heading.value = "<b>New reservation</b>" if d.is_new else (
            f"<b>Reservation {d.reservation_id}</b> ({d.status})"
        )  # fmt: skip
        self.title.value, self.description.value = d.title, d.description
        self.dialog_gpus.options = m.all_gpus
        self.dialog_gpus.value = tuple(d.gpus)
        self.start.value, self.end.value = d.start, d.end  # timezone-aware, as the picker needs
        self.start.disabled = d.status == ReservationStatus.ACTIVE
        self.save.description = "Reserve" if d.is_new else "Save changes"
        self.stop.layout.display = "none" if d.is_new else "flex"
        self.stop.description = (
            "End now" if d.status == ReservationStatus.ACTIVE else "Cancel reservation"
        )
        self.error.value = f"<span style='color:#b00'>{m.error}</span>" if m.error else ""

    # --- events --------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any) -> None:
        from ..notebook.client import HiveClientError

        try:
            fn(*args)
        except HiveClientError as error:
            self.status.value = f"<span style='color:#b00'>{error.message}</span>"

    def _brushed(self, change: dict[str, Any]) -> None:
        if change["new"] or self.brush.selected is None or len(self.brush.selected) != 2:
            return
        (x0, y0), (x1, y1) = self.brush.selected
        self.model.select(float(x0), float(x1), float(y0), float(y1))

    def _handle_clicked(self, _mark: Any, event: dict[str, Any]) -> None:
        index = event.get("data", {}).get("index", event.get("index"))
        if index is not None and 0 <= index < len(self.model.boxes):
            self.model.open(self.model.boxes[index].reservation_id)

    def _mine_chosen(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self.model.open(change["new"])

    def _mode_changed(self, change: dict[str, Any]) -> None:
        self.figure.interaction = self.brush if change["new"] == "Select time" else None
        self.handles.visible = change["new"] == "Pick a box" and bool(self.model.boxes)

    def _host_chosen(self, change: dict[str, Any]) -> None:
        host = change["new"] or None  # "": all hosts
        shown = {g.rsplit(":", 1)[0] for g in self.model.gpus}
        if (host is None and len(self.model.gpus) != len(self.model.all_gpus)) or (
            host is not None and shown != {host}
        ):
            self._call(self.model.focus, host)

    def _day_changed(self, change: dict[str, Any]) -> None:
        if isinstance(change["new"], date) and change["new"] != self.model.start:
            self._call(self.model.show, change["new"])

    def _shift(self, days: int) -> None:
        self._call(self.model.shift, days)
        self.day.value = self.model.start

    def _gpus_changed(self, change: dict[str, Any]) -> None:
        chosen = list(change["new"])
        if chosen and chosen != self.model.gpus:
            self._call(self.model.show, None, chosen)

    def _submit(self) -> None:
        m = self.model
        if m.draft is None:
            return
        if self.start.value is None or self.end.value is None:
            m.error = "Give the exact start and end times."
            self.render()
            return
        m.edit(
            title=self.title.value,
            description=self.description.value,
            gpus=list(self.dialog_gpus.value),
            start=self.start.value,
            end=self.end.value,
        )
        self._call(m.submit)
