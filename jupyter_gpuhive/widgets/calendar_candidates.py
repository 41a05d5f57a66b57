"""The earliest-slot finder on the calendar: ask POST reservations/search, highlight the answers
in the week shown, and open the booking dialog on one with a click.

`Candidates` is the state (no widget); `CandidatesPanel` adds a small form ("N GPUs for D,
NVLink, same NUMA node: Find") and two marks to a `CalendarView`: the highlighted slots and a
handle per slot that books it when clicked (it opens the dialog filled in; Reserve sends it).
"""

from __future__ import annotations

from typing import Any

import bqplot as bq
import ipywidgets as w

from ..notebook.client import HiveClientError
from ..notebook.clock import parse
from .calendar_model import PAD, CalendarModel, Draft, Span
from .messages import error_text

CANDIDATE = "#fdd835"  # a yellow that stands out from the bookings' colours
CANDIDATE_STROKE = "#8d6e00"


class Candidates:
    """The finder's answers for a model's week and GPUs, as rectangles per column."""

    def __init__(self, model: CalendarModel) -> None:
        self.model = model
        self.slots: list[dict[str, Any]] = []
        self.spans: list[tuple[int, Span]] = []  # (answer number, rectangle)

    def find(self, count: int, duration: str, **constraints: Any) -> list[dict[str, Any]]:
        """Ask the finder from the start of the week shown (or now); keep and lay out answers."""
        start, _ = self.model.window
        now = self.model.clock()
        body: dict[str, Any] = {"count": count, "duration": duration, "limit": 5,
                                "not_before": max(start, now).isoformat()}  # fmt: skip
        body.update({k: v for k, v in constraints.items() if v})
        try:
            found = self.model.client.request("POST", "reservations/search", body=body)
        except HiveClientError as error:
            self.slots, self.spans = [], []
            self.model.message = error_text(error, "search")
            self.model._changed()
            return []
        self.slots = list(found["slots"])
        self.model.message = (
            f"{len(self.slots)} slot(s) found; the first starts {self.slots[0]['start']}."
            if self.slots
            else "No slot fits before the booking horizon."
        )
        self.layout()
        return self.slots

    def layout(self) -> None:
        """The answers' rectangles in the lanes shown (answers outside the week: none)."""
        m = self.model
        position = {g: i for i, g in enumerate(m.gpus)}
        spans = []
        for n, slot in enumerate(self.slots):
            x = m.span_of(slot["start"], slot["end"])
            if x is None:
                continue
            for lane in (position[g] for g in slot["gpus"] if g in position):
                spans.append((n, Span(lane, x[0], x[1], lane + PAD, lane + 1 - PAD)))
        self.spans = spans
        m._changed()

    def at(self, x: float, y: float) -> int | None:
        """The answer drawn at a point of the figure, if any."""
        for n, span in self.spans:
            if span.x0 <= x <= span.x1 and span.y0 <= y <= span.y1:
                return n
        return None

    def pick(self, n: int) -> Draft:
        """Open the booking dialog on answer `n` (Reserve in the dialog books it)."""
        slot = self.slots[n]
        m = self.model
        m.draft = Draft("earliest slot", "", list(slot["gpus"]), parse(slot["start"]),
                        parse(slot["end"]))  # fmt: skip
        m.error = ""
        m._changed()
        return m.draft


class CandidatesPanel:
    """The finder's form and marks on a CalendarView."""

    def __init__(self, view: Any) -> None:  # a CalendarView (it imports this module)
        self.view = view
        self.state = Candidates(view.model)
        scales = {"x": view.x, "y": view.y}
        self.marks = bq.Lines(scales=scales, fill="inside", stroke_width=2,
                              colors=[CANDIDATE_STROKE], fill_colors=[CANDIDATE],
                              fill_opacities=[0.8])  # fmt: skip
        self.handles = bq.Scatter(
            scales=scales, marker="diamond", default_size=80, colors=[CANDIDATE_STROKE],
            tooltip=bq.Tooltip(fields=["name"], labels=["earliest slot (click to book)"]),
        )  # fmt: skip
        self.handles.on_element_click(self._clicked)
        view.figure.marks = [*view.figure.marks, self.marks, self.handles]
        self.count = w.BoundedIntText(value=1, min=1, max=64, description="GPUs",
                                      layout=w.Layout(width="140px"))  # fmt: skip
        self.duration = w.Text(value="2h", description="for", layout=w.Layout(width="140px"))
        self.nvlink = w.Checkbox(description="NVLink", indent=False, layout=w.Layout(width="90px"))
        self.numa = w.Checkbox(description="one NUMA node", indent=False,
                               layout=w.Layout(width="130px"))  # fmt: skip
        self.same_host = w.Checkbox(description="one host", indent=False,
                                    layout=w.Layout(width="90px"))  # fmt: skip
        find = w.Button(description="Find earliest", icon="search")
        find.on_click(lambda _b: self.find())
        self.form = w.HBox(
            [self.count, self.duration, self.nvlink, self.numa, self.same_host, find]
        )
        view.widget.children = (*view.widget.children[:3], self.form, *view.widget.children[3:])
        view.model.listeners.append(self.render)
        self.render()

    def find(self) -> list[dict[str, Any]]:
        """Search with the form's values and highlight the answers."""
        flags = {"nvlink": self.nvlink.value, "same_numa": self.numa.value,
                 "same_host": self.same_host.value}  # fmt: skip
        return self.state.find(self.count.value, self.duration.value, **flags)

    def render(self) -> None:
        spans = [s for _, s in self.state.spans]
        with self.marks.hold_sync():
            if spans:
                self.marks.x = [[s.x0, s.x1, s.x1, s.x0, s.x0] for s in spans]
                self.marks.y = [[s.y0, s.y0, s.y1, s.y1, s.y0] for s in spans]
                self.marks.fill_colors = [CANDIDATE] * len(spans)
                self.marks.colors = [CANDIDATE_STROKE] * len(spans)
            else:
                self.marks.x, self.marks.y = [[0.0, 0.0]], [[0.0, 0.0]]
            self.marks.visible = bool(spans)
        with self.handles.hold_sync():
            self.handles.x = [(s.x0 + s.x1) / 2 for s in spans] or [0.0]
            self.handles.y = [(s.y0 + s.y1) / 2 for s in spans] or [0.0]
            self.handles.names = [
                f"#{n + 1}: {', '.join(self.state.slots[n]['gpus'])}" for n, _ in self.state.spans
            ] or [""]
            self.handles.visible = bool(spans)

    def _clicked(self, _mark: Any, event: dict[str, Any]) -> None:
        index = event.get("data", {}).get("index")
        if index is not None and 0 <= index < len(self.state.spans):
            self.state.pick(self.state.spans[index][0])
