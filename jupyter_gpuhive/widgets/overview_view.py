"""OverviewView: a heat map of GPUs × slots (canvas for big grids) and a host/GPU picker."""

from __future__ import annotations

from typing import Any

import bqplot as bq
import ipywidgets as w
import numpy as np

from . import palette
from .display import Shown
from .overview_model import OverviewModel

QUEUED_COLOUR = "#756bb1"  # purple: GPUs a running queued job holds in unreserved time
SHARED_COLOUR = "#fdd49e"  # light orange: shares hold part of the GPU, room is left (#44)
SVG_CELL_LIMIT = 5000  # GridHeatMap (SVG, selectable) up to here; HeatMap (canvas) beyond


class OverviewView(Shown):
    """The grid coloured free / others / mine / queued job; picked hosts or GPUs filter views."""

    def __init__(self, model: OverviewModel, height: int | None = None) -> None:
        self.model = model
        self.x = bq.LinearScale()
        self.y = bq.LinearScale(reverse=True)
        self.colour = bq.ColorScale(
            colors=[palette.FREE, palette.OTHERS, palette.MINE, QUEUED_COLOUR, SHARED_COLOUR],
            min=0,
            max=4,
        )
        self.x_axis = bq.Axis(scale=self.x, label="time", grid_lines="none")
        self.y_axis = bq.Axis(scale=self.y, orientation="vertical", grid_lines="none")
        self.figure = bq.Figure(
            axes=[self.x_axis, self.y_axis],
            fig_margin={"top": 10, "bottom": 40, "left": 90, "right": 10},
            layout=w.Layout(width="100%", height=f"{height or 120 + 14 * 16}px"),
        )
        self.grid: bq.Mark | None = None
        self.hosts = w.SelectMultiple(description="Hosts", rows=5)
        self.gpus = w.SelectMultiple(description="GPUs", rows=5)
        show = w.Button(description="Show in calendar", icon="calendar")
        show.on_click(lambda _b: self._apply_selection())
        self.info = w.HTML()
        legend = " ".join(
            f"<span style='background:{c};padding:0 8px;border:1px solid #999'>{n}</span>"
            for n, c in (("free", palette.FREE), ("others", palette.OTHERS),
                         ("mine", palette.MINE), ("queued job", QUEUED_COLOUR),
                         ("shared, room left", SHARED_COLOUR))
        )  # fmt: skip
        self.notice = w.HTML()
        self.widget = w.VBox(
            [self.notice, w.HTML(legend), self.figure, w.HBox([self.hosts, self.gpus, show]),
             self.info]
        )  # fmt: skip
        model.listeners.append(self.render)
        self.render()

    def render(self) -> None:
        """Rebuild the grid mark from the model (one array assignment, no per-cell work)."""
        m = self.model
        rows, cols = m.matrix.shape
        self.figure.layout.height = f"{80 + 14 * max(rows, 4)}px"
        labels = {f"{i:g}": g for i, g in enumerate(m.gpus)}
        self.y_axis.tick_values = list(range(rows)) if rows <= 96 else []
        self.y_axis.tick_labels = labels
        ticks = m.day_ticks()
        self.x_axis.tick_values = list(ticks)
        self.x_axis.tick_labels = {f"{k:g}": v for k, v in ticks.items()}
        self.hosts.options = list(m.hosts)
        self.gpus.options = m.gpus
        self.notice.value = m.notice
        if (
            not rows or not cols
        ):  # no GPUs at all (a (1, 1) grid squeezes to a scalar bqplot refuses)
            self.grid, self.figure.marks = None, []
            return
        colour = m.matrix.astype(np.float32)
        scales = {"x": self.x, "y": self.y, "color": self.colour}
        if rows * cols <= SVG_CELL_LIMIT:
            grid: bq.Mark = bq.GridHeatMap(
                color=colour, scales={"row": self.y, "column": self.x, "color": self.colour},
                row=np.arange(colour.shape[0]), column=np.arange(colour.shape[1]),
                interactions={"click": "select"},
                # White cell borders only while cells are wide enough to show colour inside
                # them; a month of hours (1-2 px per cell) would be nothing but border.
                stroke="white" if cols <= 200 else None,
            )  # fmt: skip
            grid.observe(self._cells_selected, "selected")
        else:
            grid = bq.HeatMap(
                x=np.arange(colour.shape[1]), y=np.arange(colour.shape[0]), color=colour,
                scales=scales,
            )  # fmt: skip
        grid.on_element_click(self._clicked)
        self.grid = grid
        self.figure.marks = [grid]

    def _apply_selection(self) -> None:
        self.model.select(self.gpus.value, self.hosts.value)
        self.info.value = f"Selected: {', '.join(self.model.selected) or 'nothing'}"

    def _cells_selected(self, change: dict[str, Any]) -> None:
        cells = change["new"] if change["new"] is not None else []
        rows = sorted({int(r) for r, _c in np.asarray(cells).reshape(-1, 2)})
        if rows:
            self.model.select_rows(rows)
            self.info.value = f"Selected: {', '.join(self.model.selected)}"

    def _clicked(self, _mark: Any, event: dict[str, Any]) -> None:
        data = event.get("data", {})
        row, col = data.get("row"), data.get("column")
        if row is not None and col is not None:
            self.info.value = self.model.describe(int(row), int(col))
