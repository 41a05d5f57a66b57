"""Notebook views of gpuhive: reservation calendar, long-term overview, live dashboard, jobs.

Entry points (each returns a view; the last expression of a cell displays it)::

    from jupyter_gpuhive import widgets as gpuhive

    cal = gpuhive.calendar()                 # 7 days from today, a sub-column per GPU
    cal = gpuhive.calendar(start=date(2026, 5, 4), gpus=["gpu1:0", "gpu1:1"])
    ov = gpuhive.overview(calendar=cal)      # GPUs × hours of 30 days; picks filter `cal`
    ov = gpuhive.overview(days=90, slot="1d")
    dash = gpuhive.dashboard(hosts=["gpu1"], interval=5)  # live charts, processes, usage
    dash.stop()                              # end the background refresh
    jobs = gpuhive.jobs()                    # my jobs, status, log tail (live), stop, attach
    jb = gpuhive.job_builder(template="pytorch", gpus=["gpu1:0", "gpu2:0"], jobs=jobs)
    jb = gpuhive.job_builder(reservation=42)  # run on the GPUs of one of my reservations
    acc = gpuhive.accounting(month="2026-11")  # GPU-hours and energy, scores, limits
    bud = gpuhive.budgets()                  # budgets' standing; a group's statement as bars

The calendar has a lane per GPU (time runs left to right; "Host" shows one host): drag over
one or more lanes ("Select time") to open the booking dialog; hover a box for its whole title;
switch to "Pick a box" (or use the "Mine" list) to edit, end or cancel your own reservations.
Server errors (conflicts, rules) appear in the dialog in words.

The job builder picks a template (its description, options and example are shown), GPUs
(checkboxes) or one of my reservations, the command with {variables} and sweeps
(``lr=0.1,0.01`` a line); *Preview* shows the exact per-task commands and environment;
*Submit* runs it now, at a time (Schedule) or puts it in the queue (with a walltime). The job
list shows my jobs, the log tail of the selected one, a stop button and how to attach.

Every view keeps its state in a plain model (`view.model`: CalendarModel, OverviewModel,
DashboardModel, JobBuilderModel, JobListModel) that works without a browser, e.g.
``cal.model.select(0, 2, 9, 11)`` then ``cal.model.edit(title="training")`` and
``cal.model.submit()``; or ``jb.model.edit(command="python t.py --lr {lr}",
sweeps="lr=0.1,0.01")``, ``jb.model.preview()`` and ``jb.model.submit()``.

All views talk to the server through one HiveClient, found from the kernel's environment
(GPUHIVE_URL / GPUHIVE_TOKEN, exported by the server extension); pass ``client=`` to use
another.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, tzinfo
from typing import TYPE_CHECKING, Any

from ..notebook.client import HiveClient

if TYPE_CHECKING:
    from .accounting_view import AccountingView
    from .budget_view import BudgetView
    from .calendar_view import CalendarView
    from .dashboard_view import DashboardView
    from .jobs_view import JobBuilderView, JobListView
    from .overview_view import OverviewView

__all__ = [
    "accounting",
    "budgets",
    "calendar",
    "client",
    "dashboard",
    "job_builder",
    "jobs",
    "overview",
]

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
    """The reservation calendar: `days` days from `start` (today), a lane per GPU."""
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


def jobs(
    client: Any = None, *, user: str | None = None, interval: float = 2.0, live: bool = True
) -> JobListView:
    """My jobs (or `user`'s) with status and the selected job's log tail; stop, attach."""
    from .joblist_model import JobListModel
    from .jobs_view import JobListView

    model = JobListModel(client or globals()["client"](), user=user)
    view = JobListView(model, interval=interval)
    view.refresh()
    if live:
        view.start()
    return view


def job_builder(
    client: Any = None,
    *,
    template: str | None = None,
    gpus: Sequence[str] = (),
    reservation: int | None = None,
    command: str | None = None,
    jobs: JobListView | None = None,
) -> JobBuilderView:
    """Build a job from a template on GPUs or a reservation; preview it; run, schedule, queue.

    With `jobs`, a submitted job is selected in that job list (its log tail follows)."""
    from .builder_model import JobBuilderModel
    from .jobs_view import JobBuilderView

    model = JobBuilderModel(client or globals()["client"]())
    model.load()
    if template is not None:
        model.choose_template(template)
    elif model.form.template in model.templates:
        model.choose_template(model.form.template)
    if command is not None:
        model.edit(command=command)
    if gpus:
        model.pick_gpus(gpus)
    if reservation is not None:
        model.choose_reservation(reservation)
    if jobs is not None:
        listing = jobs.model

        def follow(job: dict[str, Any]) -> None:
            listing.refresh()
            listing.select(job["id"])

        model.submitted.append(follow)
    return JobBuilderView(model)


def accounting(
    client: Any = None, *, month: str | None = None, zone: tzinfo | str | None = None
) -> AccountingView:
    """A month's accounting as bar charts (per user, group, host), usage scores, and limits
    (admins may set them here)."""
    from .accounting_model import AccountingModel
    from .accounting_view import AccountingView

    model = AccountingModel(client or globals()["client"](), month=month, zone=zone)
    model.load()
    return AccountingView(model)


def budgets(client: Any = None) -> BudgetView:
    """The budgets I may see: a period's standing, and who used what on which hosts (a
    group's statement, for its host group's administrators) as bars."""
    from .budget_model import BudgetModel
    from .budget_view import BudgetView

    model = BudgetModel(client or globals()["client"]())
    model.load()
    return BudgetView(model)
