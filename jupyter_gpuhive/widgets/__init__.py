"""Notebook views of gpuhive: reservation calendar, long-term overview, live dashboard.

Entry points (each returns a view; the last expression of a cell displays it)::

    from jupyter_gpuhive import widgets as gpuhive

    cal = gpuhive.calendar()                 # 7 days from today, a sub-column per GPU
    cal = gpuhive.calendar(start=date(2026, 5, 4), gpus=["gpu1:0", "gpu1:1"])
    ov = gpuhive.overview(calendar=cal)      # GPUs × hours of 30 days; picks filter `cal`
    ov = gpuhive.overview(days=90, slot="1d")
    dash = gpuhive.dashboard(hosts=["gpu1"], interval=5)  # live charts, processes, usage
    dash.stop()                              # end the background refresh

In the calendar, drag over one or more GPU columns ("Select time") to open the booking
dialog; switch to "Pick a box" (or use the "Mine" list) to edit, end or cancel your own
reservations. Server errors (conflicts, rules) appear in the dialog in words.

Every view keeps its state in a plain model (`view.model`: CalendarModel, OverviewModel,
DashboardModel) that works without a browser, e.g. ``cal.model.select(0, 2, 9, 11)`` then
``cal.model.edit(title="training")`` and ``cal.model.submit()``.

All views talk to the server through one HiveClient, found from the kernel's environment
(GPUHIVE_URL / GPUHIVE_TOKEN, exported by the server extension); pass ``client=`` to use
another. A job builder will join these once the jobs REST API exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, tzinfo
from typing import TYPE_CHECKING, Any

from ..client import HiveClient

if TYPE_CHECKING:
    from .calendar_view import CalendarView
    from .dashboard_view import DashboardView
    from .overview_view import OverviewView

__all__ = ["calendar", "client", "dashboard", "overview"]

_client: HiveClient | None = None


def client() -> HiveClient:
    """The kernel's shared HiveClient (created on first use)."""
    global _client
    if _client is None:
        _client = HiveClient()
    return _client


def calendar(
    client: Any = None,
    *,
    start: date | None = None,
    days: int = 7,
    gpus: Sequence[str] | None = None,
    zone: tzinfo | str | None = None,
) -> CalendarView:
    """The reservation calendar: `days` days from `start` (today), one sub-column per GPU."""
    from .calendar_model import CalendarModel
    from .calendar_view import CalendarView

    model = CalendarModel(
        client or globals()["client"](), start=start, days=days, gpus=gpus, zone=zone
    )
    model.load()
    return CalendarView(model)


def overview(
    client: Any = None,
    *,
    start: date | None = None,
    days: int = 30,
    slot: str = "1h",
    zone: tzinfo | str | None = None,
    calendar: CalendarView | None = None,
) -> OverviewView:
    """GPUs by host × hours (or days) of a span; hosts/GPUs picked here filter `calendar`."""
    from .overview_model import OverviewModel
    from .overview_view import OverviewView

    model = OverviewModel(
        client or globals()["client"](), start=start, days=days, slot=slot, zone=zone
    )
    model.load()
    if calendar is not None:
        model.link(calendar.model)
    return OverviewView(model)


def dashboard(
    client: Any = None,
    *,
    hosts: Sequence[str] = (),
    gpus: Sequence[str] = (),
    interval: float = 5.0,
    live: bool = True,
    reservation: int | None = None,
    charts: list[str] | None = None,
) -> DashboardView:
    """Live charts, the process table and a reservation's usage for chosen hosts/GPUs."""
    from .dashboard_model import DashboardModel
    from .dashboard_view import DashboardView

    model = DashboardModel(client or globals()["client"](), hosts=hosts, gpus=gpus)
    if reservation is not None:
        model.usage_id = reservation
    view = DashboardView(model, interval=interval, charts=charts)
    view.refresh()
    if live:
        view.start()
    return view
