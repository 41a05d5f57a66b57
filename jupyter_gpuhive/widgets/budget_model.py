"""BudgetModel: the budgets I may see, one budget's standing and its statement (who used what
on which hosts), as the server shows them to me.

Works without a browser: ``model.load()``, ``model.choose(budget_id)``,
``model.bars("user", "gpu_hours")``, ``model.standing_text()``, ``model.shift(-1)`` (the
period before).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ..notebook.client import HiveClientError
from .display import Observed

UNITS = {"gpu_hours": "GPU-hours", "kwh": "kWh"}
BY = ("user", "host")


class BudgetModel(Observed):
    """The budgets shown to me; the chosen one's standing and statement in one period."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.budgets: list[dict[str, Any]] = []
        self.chosen: dict[str, Any] | None = None  # the budget, its standing in `at`'s period
        self.at: str | None = None  # an instant of the period shown (None: now)
        self.rows: list[dict[str, Any]] = []  # the statement's lines
        self.error = ""
        self.statement_error = ""
        self.listeners: list[Callable[[], None]] = []

    def load(self) -> None:
        """Fetch the budgets I may see, and the chosen one (the first, at first)."""
        try:
            self.budgets = self.client.request("GET", "budgets")["budgets"]
            self.error = ""
        except HiveClientError as error:
            self.budgets, self.error = [], error.message
        ids = [b["id"] for b in self.budgets]
        wanted = self.chosen["id"] if self.chosen and self.chosen["id"] in ids else None
        if wanted is None and ids:
            wanted = ids[0]
        self.choose(wanted)

    def choose(self, budget_id: int | None) -> None:
        """Show one budget (None: none) in the period of `at`, with its statement."""
        self.chosen, self.rows, self.statement_error = None, [], ""
        if budget_id is not None:
            params = {"at": self.at}
            try:
                self.chosen = self.client.request("GET", f"budgets/{budget_id}", params=params)
                found = self.client.request("GET", f"budgets/{budget_id}/statement", params=params)
                self.rows = found["rows"]
            except HiveClientError as error:
                if self.chosen is None:
                    self.error = error.message
                else:  # the statement is for the group's administrators
                    self.statement_error = error.message
        self._changed()

    def shift(self, periods: int) -> None:
        """Show the period `periods` before (negative) or after the one shown."""
        standing = (self.chosen or {}).get("standing")
        if not standing:
            return
        edge = "period_start" if periods < 0 else "period_end"
        instant = datetime.fromisoformat(standing[edge])
        step = timedelta(seconds=-1) if periods < 0 else timedelta(seconds=0)
        self.at = (instant + step).isoformat()
        self.choose(self.chosen["id"] if self.chosen else None)
        if periods not in (-1, 1):
            self.shift(periods + (1 if periods < 0 else -1))

    # --- what the view shows -------------------------------------------------------------

    def bars(self, by: str, unit: str) -> tuple[list[str], list[float]]:
        """The statement's `unit` summed per user or host, largest first."""
        totals: dict[str, float] = {}
        for row in self.rows:
            totals[row[by]] = totals.get(row[by], 0.0) + float(row[unit])
        ordered = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
        return [k for k, _ in ordered], [round(v, 4) for _, v in ordered]

    def standing_text(self) -> str:
        """The chosen budget's standing in words."""
        if self.chosen is None:
            return "No budget applies to you." if not self.error else ""
        standing = self.chosen.get("standing")
        subject = f"{self.chosen['scope']} {self.chosen['name']}"
        if standing is None:
            return f"The budget of {subject} has no period then (it runs over its dates)."
        parts = []
        for unit, words in UNITS.items():
            figures = standing.get(unit)
            if figures:
                parts.append(
                    f"{figures['used']:.2f} {words} used and {figures['committed']:.2f} booked "
                    f"ahead of {figures['allowance']:.2f}: {figures['left']:.2f} left"
                )
        renews = standing.get("renews_at")
        when = f"renews {renews}" if renews else f"ends {standing['period_end']}"
        return f"{subject}, {standing['period']}: " + "; ".join(parts) + f" ({when})."
