"""BudgetView: a budget's standing and its statement as bars per user or host (bqplot)."""

from __future__ import annotations

import html

import ipywidgets as w

from .bars import BarChart
from .budget_model import BY, UNITS, BudgetModel
from .display import Shown


class BudgetView(Shown):
    """Pick a budget; its period's standing in words, and who used what (per user or host,
    GPU-hours or kWh) as bars and as a table; the periods before and after."""

    def __init__(self, model: BudgetModel) -> None:
        self.model = model
        self.chart = BarChart("280px")
        self.bars, self.y_axis, self.figure = self.chart.bars, self.chart.y_axis, self.chart.figure
        self.budget = w.Dropdown(description="Budget")
        self.unit = w.ToggleButtons(options=[(v, k) for k, v in UNITS.items()])
        self.by = w.ToggleButtons(options=list(BY), value="user")
        before, after = w.Button(icon="chevron-left"), w.Button(icon="chevron-right")
        before.on_click(lambda _b: model.shift(-1))
        after.on_click(lambda _b: model.shift(1))
        self.budget.observe(self._pick, "value")
        for control in (self.unit, self.by):
            control.observe(lambda _c: self.render(), "value")
        self.error, self.standing, self.table = w.HTML(), w.HTML(), w.HTML()
        self.widget = w.VBox([
            self.error, w.HBox([self.budget, before, after]), self.standing,
            w.HBox([self.unit, self.by]), self.figure, self.table,
        ])  # fmt: skip
        model.listeners.append(self.render)
        self.render()

    def _pick(self, change: dict[str, object]) -> None:
        chosen = self.model.chosen
        if change["new"] is not None and (chosen is None or chosen["id"] != change["new"]):
            self.model.choose(int(str(change["new"])))

    def render(self) -> None:
        m = self.model
        self.error.value = (
            f"<span style='color:#b00'>{html.escape(m.error)}</span>" if m.error else ""
        )
        options = [(f"{b['scope']} {b['name']} ({b['period']})", b["id"]) for b in m.budgets]
        if self.budget.options != tuple(options):
            self.budget.options = options
        self.budget.value = m.chosen["id"] if m.chosen else None
        self.standing.value = html.escape(m.standing_text())
        names, values = m.bars(self.by.value, self.unit.value)
        self.bars.x, self.bars.y = names, values
        self.y_axis.label = UNITS[self.unit.value]
        if m.statement_error:
            self.table.value = html.escape(m.statement_error)
            return
        head = "".join(f"<th style='padding:2px 8px'>{h}</th>" for h in
                       ("user", "host", "kind", "GPU-hours", "kWh"))  # fmt: skip
        body = "".join(
            "<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(str(r[k]))}</td>"
                             for k in ("user", "host", "kind", "gpu_hours", "kwh")) + "</tr>"
            for r in m.rows
        )  # fmt: skip
        self.table.value = f"<table><tr>{head}</tr>{body}</table>" if m.rows else "No use yet."
