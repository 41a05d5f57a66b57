"""Usage scores and the accounting report, from the metered charges and the reservations.

Usage score of a user over a window (default the last 30 days, up to now):

- reserved GPU-hours: their reservations (not cancelled) within the window;
- used GPU-hours: GPU-hours in their reservations weighted by utilisation (a GPU at 50 %
  for an hour is half a GPU-hour), and busy GPU-hours (any process or load);
- reserved-but-idle GPU-hours: reserved minus busy;
- no-shows and violations caused (as offender) that began in the window;
- efficiency: used (weighted) / reserved, in percent, over the reserved GPU-hours whose
  utilisation was measured: the hours of MIG slices (the driver reports no utilisation of a
  slice) and the hours a GPU in MIG mode was charged without one are left out and shown as
  `unmeasured_gpu_hours`. Unknown is neither idle nor busy: a user with no measured hour has
  no efficiency (None), so no efficiency tier applies to them.

Accounting report per month (site time), per user, group and host and for the site:
GPU-hours reserved, used (busy, whoever paid), used by queued jobs outside reservations,
energy in kWh and measured GPU-hours (see `monitor.accounting` for how time and energy are
charged and how gaps are treated). Each user's, and each host's, figures add up to the
site's: every charged second has one payer ('' for GPUs nobody held or used, shown as
"(nobody)") and every GPU one host. Groups overlap (one user may be in several, or none),
so group rows need not add up.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from ..errors import Invalid
from ..store.accounting import QUEUED, RESERVED, Booked
from ..store.reports import Reserved, Summed

NOBODY = "(nobody)"
COLUMNS = ("reserved_gpu_hours", "used_gpu_hours", "queued_gpu_hours", "energy_kwh",
           "measured_gpu_hours")  # fmt: skip
_TOLERANCE = 1e-6


def parse_month(text: Any, name: str = "month") -> date:
    """'2026-11' as the first day of that month."""
    if not isinstance(text, str):
        raise Invalid(f"'{name}' must be a month such as '2026-11'.")
    try:
        year, month = (int(p) for p in text.split("-"))
        return date(year, month, 1)
    except ValueError:
        raise Invalid(f"'{name}' must be a month such as '2026-11', not {text!r}.") from None


def month_start(month: date, zone: tzinfo) -> datetime:
    """The first instant of a site-local month."""
    return datetime(month.year, month.month, 1, tzinfo=zone)


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def overlap_hours(start: datetime, end: datetime, a: datetime, b: datetime) -> float:
    """Hours of [start, end) within [a, b)."""
    return max(0.0, (min(end, b) - max(start, a)).total_seconds() / 3600)


# --- usage scores ------------------------------------------------------------------------------


def scores(
    users: Iterable[str],
    booked: Sequence[Booked],
    charges: Mapping[tuple[str, str], Mapping[str, float]],
    no_shows: Mapping[str, int],
    caused: Mapping[str, int],
    start: datetime,
    end: datetime,
    unix_user: Callable[[str], str] = lambda name: name,
) -> list[dict[str, Any]]:
    """The usage score of each user over [start, end)."""
    reserved: dict[str, float] = {}
    on_slices: dict[str, float] = {}
    for b in booked:
        hours = overlap_hours(b.start, b.end, start, end) * b.share
        reserved[b.owner] = reserved.get(b.owner, 0.0) + hours
        if b.slice:
            on_slices[b.owner] = on_slices.get(b.owner, 0.0) + hours
    out = []
    for user in sorted(set(users)):
        inside = charges.get((user, RESERVED), {})
        weighted = inside.get("util_seconds", 0.0) / 3600
        busy = inside.get("used_seconds", 0.0) / 3600
        outside = sum(
            f.get("used_seconds", 0.0) for (payer, kind), f in charges.items()
            if payer == user and kind != RESERVED
        ) / 3600  # fmt: skip
        booked_hours = reserved.get(user, 0.0)
        unrated = inside.get("unrated_seconds", 0.0) / 3600
        unmeasured = min(booked_hours, on_slices.get(user, 0.0) + unrated)
        rated = booked_hours - unmeasured
        out.append({
            "user": user,
            "reserved_gpu_hours": round(booked_hours, 3),
            "used_gpu_hours": round(weighted, 3),
            "busy_gpu_hours": round(busy, 3),
            "idle_reserved_gpu_hours": round(max(0.0, booked_hours - busy), 3),
            "used_outside_reservations_gpu_hours": round(outside, 3),
            "no_shows": no_shows.get(user, 0),
            "violations_caused": caused.get(unix_user(user), 0),
            "efficiency": round(100 * weighted / rated, 1) if rated > 0 else None,
            "unmeasured_gpu_hours": round(unmeasured, 3),
        })  # fmt: skip
    return out


# --- the accounting report -------------------------------------------------------------------


def _blank() -> dict[str, float]:
    return dict.fromkeys(COLUMNS, 0.0)


def _figures(summed: Summed) -> dict[str, float]:
    """One summed charge row as the report's columns (all but reserved)."""
    f = summed.figures
    queued = f.get("queued_seconds", f["used_seconds"] if summed.kind == QUEUED else 0.0)
    return {
        "used_gpu_hours": f["used_seconds"] / 3600,
        "queued_gpu_hours": queued / 3600,
        "energy_kwh": f["energy_j"] / 3.6e6,
        "measured_gpu_hours": f["seconds"] / 3600,
    }


def report(
    months: Sequence[date],
    zone: tzinfo,
    by_payer: Iterable[Summed],
    by_host: Iterable[Summed],
    reserved: Mapping[str, Reserved],
    groups_of: Callable[[str], Iterable[str]],
) -> dict[str, Any]:
    """The report of `months` (labels '2026-11') from the charges summed per payer and per
    host, and the GPU-hours reserved per month, per owner and per host: per month × (site,
    user, group, host), and the cross-check."""
    labels = [m.strftime("%Y-%m") for m in months]
    index = {month_start(m, zone).timestamp(): m.strftime("%Y-%m") for m in months}
    table: dict[tuple[str, str, str], dict[str, float]] = {}
    member: dict[str, tuple[str, ...]] = {}

    def add(month: str, scope: str, name: str, figures: Mapping[str, float]) -> None:
        into = table.setdefault((month, scope, name), _blank())
        for column, value in figures.items():
            into[column] += value

    def to_user(month: str, user: str, figures: Mapping[str, float]) -> None:
        add(month, "site", "", figures)
        add(month, "user", user, figures)
        if user and user not in member:
            member[user] = tuple(groups_of(user))
        for group in member.get(user, ()):
            add(month, "group", group, figures)

    for row in by_payer:
        month = index.get(row.month.timestamp())
        if month is not None:
            to_user(month, str(row.who), _figures(row))
    for row in by_host:
        month = index.get(row.month.timestamp())
        if month is not None:
            add(month, "host", str(row.who), _figures(row))
    for month, booked in reserved.items():
        for owner, hours in booked.by_owner.items():
            to_user(month, owner, {"reserved_gpu_hours": hours})
        for host, hours in booked.by_host.items():
            add(month, "host", host, {"reserved_gpu_hours": hours})
    return {
        "months": labels,
        "timezone": str(zone),
        "rows": [
            {
                "month": month,
                "scope": scope,
                "name": name or None,
                **{k: round(v, 4) for k, v in figures.items()},
            }
            for (month, scope, name), figures in sorted(table.items())
        ],
        "check": cross_check(table, labels),
    }


def cross_check(
    table: Mapping[tuple[str, str, str], Mapping[str, float]], months: Sequence[str]
) -> dict[str, Any]:
    """Whether each month's users, and its hosts, add up to the site (and by how much not)."""
    sums: dict[tuple[str, str], dict[str, float]] = {}  # (month, scope) -> column totals
    for (month, scope, _), figures in table.items():
        into = sums.setdefault((month, scope), _blank())
        for column in COLUMNS:
            into[column] += figures[column]
    worst = {"users": 0.0, "hosts": 0.0}
    for month in months:
        site = table.get((month, "site", ""), _blank())
        for scope, key in (("user", "users"), ("host", "hosts")):
            total = sums.get((month, scope), _blank())
            for column in COLUMNS:
                worst[key] = max(worst[key], abs(total[column] - site[column]))
    return {
        "users_add_up": worst["users"] <= _TOLERANCE * max(1.0, _scale(table)),
        "hosts_add_up": worst["hosts"] <= _TOLERANCE * max(1.0, _scale(table)),
        "largest_difference": round(max(worst.values()), 9),
    }


def _scale(table: Mapping[tuple[str, str, str], Mapping[str, float]]) -> float:
    return max((v for f in table.values() for v in f.values()), default=1.0)


def visible(data: dict[str, Any], user: str, groups: Iterable[str]) -> dict[str, Any]:
    """The report as a non-admin sees it: their own user and group rows, hosts, the site."""
    mine = set(groups)
    rows = [
        r for r in data["rows"]
        if r["scope"] in ("site", "host")
        or (r["scope"] == "user" and r["name"] == user)
        or (r["scope"] == "group" and r["name"] in mine)
    ]  # fmt: skip
    return {**data, "rows": rows}


def to_csv(data: Mapping[str, Any]) -> str:
    """The report's rows as CSV (one header line; '(nobody)' for charges nobody owes)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("month", "scope", "name", *COLUMNS))
    for r in data["rows"]:
        name = r["name"] if r["name"] is not None else ("" if r["scope"] == "site" else NOBODY)
        writer.writerow((r["month"], r["scope"], name, *(r[c] for c in COLUMNS)))
    return out.getvalue()


def to_text(data: Mapping[str, Any]) -> str:
    """The report as plain-text tables, one per month, and the cross-check."""
    heads = ("reserved h", "used h", "queued h", "energy kWh", "measured h")
    lines = []
    for month in data["months"]:
        lines.append(f"Accounting {month} ({data['timezone']})")
        lines.append(f"{'':<8}{'':<24}" + "".join(f"{h:>12}" for h in heads))
        for scope in ("site", "user", "group", "host"):
            for r in (r for r in data["rows"] if r["month"] == month and r["scope"] == scope):
                name = r["name"] if r["name"] is not None else ("" if scope == "site" else NOBODY)
                figures = "".join(f"{r[c]:>12.2f}" for c in COLUMNS)
                lines.append(f"{scope:<8}{name[:23]:<24}{figures}")
        lines.append("")
    check = data["check"]
    lines.append(
        f"Check: users add up to the site: {'yes' if check['users_add_up'] else 'NO'}; "
        f"hosts: {'yes' if check['hosts_add_up'] else 'NO'} "
        f"(largest difference {check['largest_difference']:g})."
    )
    return "\n".join(lines) + "\n"


def months_between(first: date, last: date) -> list[date]:
    """Every month from `first` to `last`, both included (at most 24)."""
    if last < first:
        raise Invalid("The last month must not be before the first.")
    months = [first]
    while months[-1] < last:
        months.append(next_month(months[-1]))
        if len(months) > 24:
            raise Invalid("A report spans at most 24 months.")
    return months


def window_days(days: float) -> timedelta:
    """A score window, checked (1 to 400 days)."""
    if not 1 <= days <= 400:
        raise Invalid("The window must be from 1 to 400 days.")
    return timedelta(days=days)
