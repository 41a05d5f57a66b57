"""AccountingModel: the accounting report of a month, usage scores, and (admins) limits.

Works without a browser: ``model.load()``, ``model.bars("user", "energy_kwh")``,
``model.shift(-1)`` (the month before), ``model.save_limits("group", "phd", gpus=4)``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from ..notebook.client import HiveClientError
from ..notebook.clock import UTC, as_zone
from .display import Observed

METRICS = {
    "reserved_gpu_hours": "GPU-hours reserved",
    "used_gpu_hours": "GPU-hours used",
    "queued_gpu_hours": "GPU-hours of queued jobs outside reservations",
    "energy_kwh": "Energy (kWh)",
    "measured_gpu_hours": "GPU-hours measured",
}
SCOPES = ("user", "group", "host")
LIMITS = ("gpus", "gpu_hours_week", "upcoming", "longest", "horizon")
NOBODY = "(nobody)"


def _month(day: date) -> str:
    return f"{day.year:04d}-{day.month:02d}"


class AccountingModel(Observed):
    """One month's report, the usage scores and the limits, as the server shows them to me."""

    def __init__(
        self,
        client: Any,
        *,
        month: str | None = None,
        zone: Any = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.zone = as_zone(zone)
        today = (now or (lambda: datetime.now(UTC)))().astimezone(self.zone).date()
        self.month = month or _month(today)
        self.report: dict[str, Any] = {"months": [], "rows": [], "check": {}}
        self.scores: list[dict[str, Any]] = []
        self.limits: dict[str, Any] = {}
        self.admin = False
        self.error = ""
        self.message = ""
        self.listeners: list[Callable[[], None]] = []

    def load(self) -> None:
        """Fetch the report of the month, the scores and the limits."""
        try:
            self.admin = bool(self.client.request("GET", "me").get("admin"))
            self.report = self.client.request(
                "GET", "reports/accounting", params={"month": self.month}
            )
            self.scores = self.client.request("GET", "usage/scores")["scores"]
            self.limits = self.client.request("GET", "limits")
            self.error = ""
        except HiveClientError as error:
            self.error = error.message
        self._changed()

    def shift(self, months: int) -> None:
        """Show the month `months` before (negative) or after this one."""
        year, month = (int(p) for p in self.month.split("-"))
        index = year * 12 + month - 1 + months
        self.month = f"{index // 12:04d}-{index % 12 + 1:02d}"
        self.load()

    # --- what the charts show ---------------------------------------------------------------

    def rows(self, scope: str) -> list[dict[str, Any]]:
        return [r for r in self.report.get("rows", ()) if r["scope"] == scope]

    def site(self) -> dict[str, Any]:
        return next((r for r in self.rows("site")), {m: 0.0 for m in METRICS})

    def bars(self, scope: str, metric: str) -> tuple[list[str], list[float]]:
        """Names and values of one metric per user, group or host, largest first."""
        found = sorted(self.rows(scope), key=lambda r: -float(r.get(metric) or 0))
        names = [r["name"] if r["name"] is not None else NOBODY for r in found]
        return names, [float(r.get(metric) or 0) for r in found]

    def check_text(self) -> str:
        """The cross-check in words."""
        check = self.report.get("check") or {}
        if not check:
            return ""
        users = "add up" if check.get("users_add_up") else "do NOT add up"
        hosts = "add up" if check.get("hosts_add_up") else "do NOT add up"
        return f"Per-user totals {users} to the site total; per-host totals {hosts}."

    # --- limits (admins) ----------------------------------------------------------------------

    def my_limits(self) -> list[tuple[str, Any, str, Any]]:
        """(limit, value, where it comes from, my current figure) for each set limit."""
        mine = self.limits.get("mine") or {}
        values, sources = mine.get("limits") or {}, mine.get("sources") or {}
        current, notes = mine.get("current") or {}, mine.get("notes") or {}
        out = []
        for name in LIMITS:
            if values.get(name) is None:
                continue
            source = sources.get(name, "")
            if notes.get(name):
                source += f"; {notes[name]}"
            out.append((name, values[name], source, current.get(name)))
        return out

    def save_limits(self, scope: str, name: str | None, **values: Any) -> bool:
        """Set one scope's limits (admins); empty values leave a limit to the next level."""
        limits = {k: (None if v in ("", None) else v) for k, v in values.items() if k in LIMITS}
        body = {"scope": scope, "name": name or None, "limits": limits}
        return self._admin_call("PUT", "limits", body)

    def save_tiers(self, tiers: list[dict[str, Any]]) -> bool:
        """Replace the efficiency tiers (admins)."""
        return self._admin_call("PUT", "limits/tiers", {"tiers": tiers})

    def _admin_call(self, method: str, path: str, body: dict[str, Any]) -> bool:
        try:
            answer = self.client.request(method, path, body=body)
        except HiveClientError as error:
            self.message = error.message
            self._changed()
            return False
        flags = answer.get("flag_changes") or {}
        flagged = sorted(int(k) for k, v in flags.items() if v)
        cleared = sorted(int(k) for k, v in flags.items() if not v)
        self.message = (
            "Saved."
            + (f" Flagged: {flagged}." if flagged else "")
            + (f" Cleared: {cleared}." if cleared else "")
        )
        self.load()
        return True
