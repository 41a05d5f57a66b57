"""DashboardView: live charts (chosen and ordered with tags), the process table, usage."""

from __future__ import annotations

import html
import time
from typing import Any

import bqplot as bq
import ipywidgets as w
import numpy as np

from ..notebook.client import HiveClientError
from .dashboard_model import CHARTS, DashboardModel
from .display import Shown
from .gpu_table import gpu_table
from .poller import LiveSwitch, Poller
from .topology_table import topology_table

_LINE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf"]  # fmt: skip


def _times(t: list[float]) -> np.ndarray:
    return (np.asarray(t, dtype=float) * 1000).astype("datetime64[ms]")


class Chart:
    """One figure: a line per source, updated in place."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.x, self.y = bq.DateScale(), bq.LinearScale(min=0.0)
        self.lines: dict[str, bq.Lines] = {}
        self.figure = bq.Figure(
            title=title,
            axes=[
                # Clock time on every tick (d3's default shows bare ":55" seconds).
                bq.Axis(scale=self.x, num_ticks=5, tick_format="%H:%M:%S"),
                bq.Axis(scale=self.y, orientation="vertical"),
            ],
            legend_location="top-left",
            fig_margin={"top": 40, "bottom": 30, "left": 50, "right": 10},
            layout=w.Layout(width="100%", height="260px"),
        )
        self._empty_axis()

    def _empty_axis(self) -> None:
        """No line yet: the last 10 minutes on the time axis (not milliseconds of nothing)."""
        now = np.datetime64(int(time.time() * 1000), "ms")
        self.x.min, self.x.max = now - np.timedelta64(10, "m"), now

    def update(self, data: dict[str, tuple[list[float], list[float | None]]]) -> None:
        for name, (t, values) in data.items():
            if not t:
                continue
            line = self.lines.get(name)
            x, y = _times(t), np.asarray(values, dtype=float)
            if line is None:
                colour = _LINE_COLOURS[len(self.lines) % len(_LINE_COLOURS)]
                line = bq.Lines(x=x, y=y, scales={"x": self.x, "y": self.y}, labels=[name],
                                colors=[colour], display_legend=True)  # fmt: skip
                self.lines[name] = line
                self.figure.marks = list(self.lines.values())
                self.x.min = self.x.max = None  # the data's own range from now on
            else:
                with line.hold_sync():
                    line.x, line.y = x, y
        if not self.lines:
            self._empty_axis()


PROCESS_COLUMNS = ("Host", "GPU", "PID", "Owner", "Container", "Command", "Memory",
                   "Reserved by", "Violation")  # fmt: skip


def process_table(model: DashboardModel) -> str:
    """The process table as HTML; violating processes in red."""
    head = "".join(f"<th style='text-align:left;padding:2px 8px'>{h}</th>" for h in PROCESS_COLUMNS)
    body = []
    for p in model.processes:
        style = "background:#fdd" if p.violation else ""
        cells = (p.host, p.gpu, p.pid, p.user, p.container, p.command[:60],
                 "" if p.memory_mib is None else f"{p.memory_mib} MiB", p.holder or "—",
                 "yes" if p.violation else "")  # fmt: skip
        row = "".join(f"<td style='padding:2px 8px'>{html.escape(str(c))}</td>" for c in cells)
        body.append(f"<tr style='{style}'>{row}</tr>")
    if not body:
        body.append("<tr><td colspan='9'>No GPU processes.</td></tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def usage_text(usage: dict[str, Any] | None) -> str:
    if not usage:
        return ""
    if "message" in usage:
        return f"<b>Reservation {usage['reservation']}</b>: {html.escape(usage['message'])}"
    parts = [
        f"<b>Reservation {usage['reservation']}</b>: used {usage['used_gpu_hours']:.2f} of "
        f"{usage['reserved_gpu_hours']:.2f} GPU-hours; {_utilization(usage)}"
    ]
    for g in usage.get("gpus", []):
        parts.append(
            f"{html.escape(g['gpu'])}: {g.get('used_gpu_hours', 0):.2f} h used, "
            f"{g.get('samples', 0)} samples, {_utilization(g)}"
            + (f", memory {html.escape(g['mem_label'])}" if g.get("mem_label") else "")
        )
    return "<br>".join(parts)


def _utilization(usage: dict[str, Any]) -> str:
    """'mean utilization 40%, max 80%', or 'utilization not reported' (MIG slices), never 0 %."""
    if usage.get("util_label"):
        return f"utilization {html.escape(usage['util_label'])}"
    mean, most = usage.get("mean_util"), usage.get("max_util")
    return (f"mean utilization {mean if mean is not None else '—'}%, "
            f"max {most if most is not None else '—'}%")  # fmt: skip


class DashboardView(Shown):
    """Charts, processes and usage, refreshed in place by a background Poller."""

    def __init__(
        self, model: DashboardModel, interval: float = 5.0, charts: list[str] | None = None
    ) -> None:
        self.model = model
        self.charts = {title: Chart(title) for title in CHARTS}
        self.order = w.TagsInput(
            value=charts or [*list(CHARTS)[:4], "Host CPU (%)"],
            allowed_tags=list(CHARTS),
            allow_duplicates=False,
        )
        self.order.observe(lambda _c: self._arrange(), "value")
        self.grid = w.GridBox(layout=w.Layout(grid_template_columns="repeat(2, 1fr)"))
        self.gpus = w.HTML()  # a row per GPU, its MIG slices under it (widgets/gpu_table.py)
        self.table = w.HTML()
        self.topology = w.HTML()  # each host's topology (widgets/topology_table.py)
        self.reservation = w.Dropdown(description="Usage of", layout=w.Layout(width="420px"))
        self.reservation.observe(self._watch, "value")
        self.usage = w.HTML()
        self.status = w.HTML()
        self.poller = Poller(self.refresh, interval, name="gpuhive-dashboard")
        self.live = LiveSwitch(self.poller)
        self.toggle = toggle = self.live.button
        self.notice = w.HTML()
        self.widget = w.VBox(
            [self.notice, w.HBox([toggle, self.status]), w.HTML("Charts (drag to re-order):"),
             self.order,
             self.grid, w.HTML("<b>GPUs</b>"), self.gpus,
             w.HTML("<b>GPU processes</b>"), self.table,
             w.HTML("<b>GPU topology</b>"), self.topology,
             w.HBox([self.reservation]), self.usage]
        )  # fmt: skip
        self._arrange()

    def _arrange(self) -> None:
        self.grid.children = [self.charts[t].figure for t in self.order.value if t in self.charts]

    def refresh(self) -> None:
        """Poll the server once and update every widget in place."""
        self.model.poll()
        self.render()

    def render(self) -> None:
        m = self.model
        for title, chart in self.charts.items():
            chart.update(m.chart(title))
        self.gpus.value = gpu_table(m.state, m.wants_gpu)
        self.table.value = process_table(m)
        self.topology.value = topology_table(m.state, m.wants_host)
        self.notice.value = m.notice
        self.usage.value = usage_text(m.usage)
        options: list[tuple[str, int | None]] = [("—", None)]
        for h in m.state:
            for g in h.get("gpus", []):
                r = g.get("reservation")
                label = f"{r['owner']}: {r['title']}" if r else ""
                if r and m.wants_gpu(g["id"]) and (label, r["id"]) not in options:
                    options.append((label, r["id"]))
        if m.usage_id is not None and all(v != m.usage_id for _l, v in options):
            options.append((f"reservation {m.usage_id}", m.usage_id))
        if list(self.reservation.options) != options:
            self.reservation.options = options
            self.reservation.value = m.usage_id
        error = self.poller.last_error
        self.status.value = f"<span style='color:#b00'>{html.escape(error)}</span>" if error else ""

    def _watch(self, change: dict[str, Any]) -> None:
        if change["new"] == self.model.usage_id:
            return
        try:
            self.model.watch_usage(change["new"])
        except HiveClientError as error:
            self.status.value = html.escape(error.message)
        self.usage.value = usage_text(self.model.usage)

    def start(self) -> None:
        """Start the live refresh (also the Live button)."""
        self.live.start()

    def stop(self) -> None:
        self.live.stop()
