"""AccountingView: bar charts of a month's accounting, usage scores, and an admin limits form."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from .accounting_model import LIMITS, METRICS, SCOPES, AccountingModel
from .bars import BarChart
from .display import Shown

SCORE_COLUMNS = (
    ("user", "user"),
    ("reserved_gpu_hours", "reserved h"),
    ("used_gpu_hours", "used h (× util)"),
    ("idle_reserved_gpu_hours", "reserved, idle h"),
    ("no_shows", "no-shows"),
    ("violations_caused", "violations"),
    ("efficiency", "efficiency %"),
    ("unmeasured_gpu_hours", "not measured h"),  # MIG: no utilisation reported, not 0 %
)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    cells = "".join(f"<th style='padding:2px 8px'>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(str(v))}</td>" for v in r)
        + "</tr>"
        for r in rows
    )  # fmt: skip
    return f"<table><tr>{cells}</tr>{body}</table>"


def _score(score: dict[str, Any], key: str) -> Any:
    """One cell of the scores table: an efficiency over no measured hour is 'not measured'."""
    value = score.get(key)
    if value is None and key == "efficiency" and score.get("unmeasured_gpu_hours"):
        return "not measured"
    return "–" if value is None else value


class AccountingView(Shown):
    """A month's report as bars (pick the metric and per user, group or host), the site total
    and the cross-check; my usage score (admins: everyone's); an admin section for limits."""

    def __init__(self, model: AccountingModel) -> None:
        self.model = model
        self.chart = BarChart("300px")
        self.bars, self.y_axis, self.figure = self.chart.bars, self.chart.y_axis, self.chart.figure
        self.metric = w.Dropdown(options=[(v, k) for k, v in METRICS.items()], description="Show")
        self.scope = w.ToggleButtons(options=list(SCOPES), value="user")
        self.month = w.HTML()
        before, after = w.Button(icon="chevron-left"), w.Button(icon="chevron-right")
        before.on_click(lambda _b: model.shift(-1))
        after.on_click(lambda _b: model.shift(1))
        for control in (self.metric, self.scope):
            control.observe(lambda _c: self.render(), "value")
        self.site, self.check, self.scores = w.HTML(), w.HTML(), w.HTML()
        self.error, self.limit_table = w.HTML(), w.HTML()
        self.admin = self._admin_section()
        self.widget = w.VBox([
            self.error, w.HBox([before, self.month, after, self.metric]), self.scope,
            self.figure, self.site, self.check, w.HTML("<b>Usage score</b>"), self.scores,
            w.HTML("<b>My limits</b>"), self.limit_table, self.admin,
        ])  # fmt: skip
        model.listeners.append(self.render)
        self.render()

    def _admin_section(self) -> w.Widget:
        self.limit_scope = w.Dropdown(options=["default", "group", "user"], description="Scope")
        self.limit_name = w.Text(description="Name", placeholder="group or user")
        self.limit_fields = {
            name: w.Text(description=name, placeholder="inherit") for name in LIMITS
        }
        save = w.Button(description="Save limits", icon="save")
        save.on_click(lambda _b: self.save_limits())
        self.tier_below = w.FloatText(description="Efficiency <", value=30.0)
        self.tier_factor = w.FloatText(description="Factor", value=0.5)
        tiers = w.Button(description="Save tier", icon="save")
        tiers.on_click(lambda _b: self.save_tier())
        self.admin_message = w.HTML()
        return w.VBox([
            w.HTML("<b>Set limits (admin)</b>"),
            w.HBox([self.limit_scope, self.limit_name]),
            w.GridBox(list(self.limit_fields.values()),
                      layout=w.Layout(grid_template_columns="repeat(3, 33%)")),
            save, w.HBox([self.tier_below, self.tier_factor, tiers]), self.admin_message,
        ])  # fmt: skip

    def save_limits(self) -> None:
        values: dict[str, Any] = {}
        for name, field in self.limit_fields.items():
            text = field.value.strip()
            values[name] = None if not text else (text if name in ("longest", "horizon")
                                                  else float(text))  # fmt: skip
        if values.get("gpus") is not None:
            values["gpus"] = int(values["gpus"])
        if values.get("upcoming") is not None:
            values["upcoming"] = int(values["upcoming"])
        self.model.save_limits(self.limit_scope.value, self.limit_name.value.strip(), **values)

    def save_tier(self) -> None:
        tier = {"efficiency_below": self.tier_below.value, "limit": "gpu_hours_week",
                "factor": self.tier_factor.value}  # fmt: skip
        self.model.save_tiers([tier])

    def render(self) -> None:
        m = self.model
        error = html.escape(m.error)
        self.error.value = f"<span style='color:#b00'>{error}</span>" if m.error else ""
        zone = html.escape(str(m.report.get("timezone", "")))
        self.month.value = f"<b>{html.escape(m.month)}</b> ({zone})"
        names, values = m.bars(self.scope.value, self.metric.value)
        self.bars.x, self.bars.y = names, values
        self.y_axis.label = METRICS[self.metric.value]
        site = m.site()
        self.site.value = "Site: " + ", ".join(
            f"{label} {float(site.get(key) or 0):.2f}" for key, label in METRICS.items()
        )
        self.check.value = html.escape(m.check_text())
        self.scores.value = _table(
            [label for _, label in SCORE_COLUMNS],
            [[_score(s, key) for key, _ in SCORE_COLUMNS] for s in m.scores],
        )  # fmt: skip
        self.admin.layout.display = None if m.admin else "none"
        mine = m.my_limits()
        self.limit_table.value = (
            _table(["my limit", "value", "from", "now"], [list(r) for r in mine])
            if mine else "No limits apply to you."
        )  # fmt: skip
        self.admin_message.value = html.escape(m.message)
