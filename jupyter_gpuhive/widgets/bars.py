"""A bar chart of names and values (bqplot), as the accounting and budget views draw them."""

from __future__ import annotations

import bqplot as bq
import ipywidgets as w

from . import palette


class BarChart:
    """Bars over an ordinal axis of names (`bars.x`, `bars.y`); `figure` is the widget."""

    def __init__(self, height: str = "300px") -> None:
        self.x, self.y = bq.OrdinalScale(), bq.LinearScale(min=0.0)
        self.bars = bq.Bars(x=[], y=[], scales={"x": self.x, "y": self.y}, colors=[palette.MINE])
        self.y_axis = bq.Axis(scale=self.y, orientation="vertical", label="")
        self.figure = bq.Figure(
            marks=[self.bars], axes=[bq.Axis(scale=self.x), self.y_axis],
            fig_margin={"top": 10, "bottom": 60, "left": 60, "right": 10},
            layout=w.Layout(width="100%", height=height),
        )  # fmt: skip
