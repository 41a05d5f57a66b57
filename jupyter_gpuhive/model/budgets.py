"""Budgets as values: what a group or a user may spend per period, in GPU-hours and/or kWh.

A budget's period is a site-local calendar month, a calendar quarter, or explicit dates (the
first and the last day, both included). What counts against a period (`Standing`):

- used: what the meter charged the user (or the group's members) within the period, every
  kind but idle (reserved, queued, job, unreserved): past bookings count what they really
  held, corrected by use (a booking cancelled or ended early counts only its time), and
  queued or preemptible jobs what they ran;
- committed: the future hours of bookings (from now to their end, within the period), a share
  counting its part (a quarter GPU for 4 h is 1 GPU-hour); their energy is estimated at
  `kwh_per_gpu_hour` until the meter measures it.

With carry-over, what the previous period left (or overdrew) moves into the current one, at
most one period's amount. A site admin may allow an overdraft, in percent of the allowance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from ..errors import Invalid
from .core import describe_instant

SCOPES = ("group", "user")
PERIODS = ("month", "quarter", "dates")
UNITS = ("gpu_hours", "kwh")
UNIT_WORDS = {"gpu_hours": "GPU-hours", "kwh": "kWh"}
DEFAULT_WARN_AT = (80.0, 100.0)
KWH_PER_GPU_HOUR = 0.3  # the energy a committed GPU-hour is estimated at (300 W)
MAX_AMOUNT = 1e9
NAME_MAX = 128
EPS = 1e-6  # GPU-hours (3.6 ms) or kWh: what the sums' rounding may leave over


@dataclass(frozen=True)
class Period:
    """One period of a budget: [start, end) and its label ('2026-12', '2026-Q4', dates)."""

    start: datetime
    end: datetime
    label: str
    renews: bool = True  # a month or quarter renews at its end; dates end

    def hours_of(self, start: datetime, end: datetime) -> float:
        """Hours of [start, end) within this period."""
        return max(0.0, (min(end, self.end) - max(start, self.start)).total_seconds() / 3600)


@dataclass(frozen=True)
class Budget:
    """A budget of a group or a user (`scope`, `name`) per period."""

    scope: str
    name: str
    period: str = "month"
    gpu_hours: float | None = None
    kwh: float | None = None
    carry_over: bool = False
    overdraft_percent: float = 0.0
    starts: date | None = None  # the first day (period 'dates')
    ends: date | None = None  # the last day, included (period 'dates')
    warn_at: tuple[float, ...] = DEFAULT_WARN_AT
    kwh_per_gpu_hour: float = KWH_PER_GPU_HOUR
    id: int = 0
    updated_by: str = ""

    @property
    def subject(self) -> str:
        """'group physics' or 'user alice'."""
        return f"{self.scope} {self.name}"

    def amount(self, unit: str) -> float | None:
        return self.gpu_hours if unit == "gpu_hours" else self.kwh

    def applies_to(self, user: str, groups: frozenset[str]) -> bool:
        if self.scope == "user":
            return self.name == user
        return self.name in groups

    # --- periods ---------------------------------------------------------------------

    def period_at(self, instant: datetime, zone: tzinfo) -> Period | None:
        """The period `instant` falls in (None: outside a dates budget's days)."""
        local = instant.astimezone(zone)
        if self.period == "dates":
            assert self.starts is not None
            assert self.ends is not None
            first, after = _midnight(self.starts, zone), _midnight(self.ends + _DAY, zone)
            if not first <= instant < after:
                return None
            return Period(first, after, f"{self.starts}..{self.ends}", renews=False)
        months = 3 if self.period == "quarter" else 1
        first_month = (local.month - 1) // months * months + 1
        begin = date(local.year, first_month, 1)
        after_day = _add_months(begin, months)
        label = f"{begin.year}-Q{(first_month - 1) // 3 + 1}" if months == 3 else f"{begin:%Y-%m}"
        return Period(_midnight(begin, zone), _midnight(after_day, zone), label)

    def periods(self, start: datetime, end: datetime, zone: tzinfo) -> list[Period]:
        """The periods overlapping [start, end), in order."""
        found: list[Period] = []
        if self.period == "dates":
            inside = self.period_at(max(start, self._first(zone)), zone)
            return [inside] if inside is not None and inside.start < end else []
        at = start
        while at < end:
            period = self.period_at(at, zone)
            assert period is not None
            found.append(period)
            at = period.end
        return found

    def previous(self, period: Period, zone: tzinfo) -> Period | None:
        """The period before `period` (None for dates: nothing carries into them)."""
        if self.period == "dates":
            return None
        return self.period_at(period.start - timedelta(seconds=1), zone)

    def _first(self, zone: tzinfo) -> datetime:
        assert self.starts is not None
        return _midnight(self.starts, zone)

    # --- JSON ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scope": self.scope,
            "name": self.name,
            "period": self.period,
            "starts": self.starts.isoformat() if self.starts else None,
            "ends": self.ends.isoformat() if self.ends else None,
            "gpu_hours": self.gpu_hours,
            "kwh": self.kwh,
            "carry_over": self.carry_over,
            "overdraft_percent": self.overdraft_percent,
            "warn_at": list(self.warn_at),
            "kwh_per_gpu_hour": self.kwh_per_gpu_hour,
            "updated_by": self.updated_by,
        }

    def checked(self) -> Budget:
        """This budget, or Invalid (422) saying what is wrong with it."""
        if self.scope not in SCOPES:
            raise Invalid(f"'scope' must be group or user, not {self.scope!r}.")
        name = self.name.strip() if isinstance(self.name, str) else ""
        if not name or len(name) > NAME_MAX:
            raise Invalid(
                f"A budget needs the {self.scope}'s 'name' (at most {NAME_MAX} characters)."
            )
        if self.period not in PERIODS:
            raise Invalid(f"'period' must be month, quarter or dates, not {self.period!r}.")
        if self.period == "dates":
            if self.starts is None or self.ends is None:
                raise Invalid(
                    "A budget over dates needs 'starts' and 'ends' (its first and last day)."
                )
            if self.ends < self.starts:
                raise Invalid(
                    "A budget's last day ('ends') must not be before its first ('starts')."
                )
            if self.carry_over:
                raise Invalid(
                    "Only a month or quarter budget carries over: one over dates has no next."
                )
        elif self.starts is not None or self.ends is not None:
            raise Invalid("'starts' and 'ends' belong to a budget over dates (period 'dates').")
        if self.gpu_hours is None and self.kwh is None:
            raise Invalid("A budget needs 'gpu_hours', 'kwh' or both.")
        for unit in UNITS:
            value = self.amount(unit)
            if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_AMOUNT):
                raise Invalid(f"'{unit}' must be a number from 0 to {MAX_AMOUNT:g}.")
        if not (math.isfinite(self.overdraft_percent) and 0 <= self.overdraft_percent <= 1000):
            raise Invalid("'overdraft_percent' must be from 0 to 1000.")
        if not (math.isfinite(self.kwh_per_gpu_hour) and 0 <= self.kwh_per_gpu_hour <= 100):
            raise Invalid("'kwh_per_gpu_hour' must be from 0 to 100.")
        if len(self.warn_at) > 10 or any(
            not (math.isfinite(t) and 0 < t <= 1000) for t in self.warn_at
        ):
            raise Invalid(
                "'warn_at' must list at most 10 percentages, each above 0 and at most 1000."
            )
        return replace(self, name=name, warn_at=tuple(sorted(set(self.warn_at))))


@dataclass(frozen=True)
class Figures:
    """GPU-hours and kWh."""

    gpu_hours: float = 0.0
    kwh: float = 0.0

    def get(self, unit: str) -> float:
        return self.gpu_hours if unit == "gpu_hours" else self.kwh

    def __add__(self, other: Figures) -> Figures:
        return Figures(self.gpu_hours + other.gpu_hours, self.kwh + other.kwh)


@dataclass(frozen=True)
class Standing:
    """A budget in one period: used, committed ahead, carried in, and what is left."""

    budget: Budget
    period: Period
    used: Figures = field(default_factory=Figures)
    committed: Figures = field(default_factory=Figures)
    carried: Figures = field(default_factory=Figures)

    def allowance(self, unit: str) -> float | None:
        amount = self.budget.amount(unit)
        return None if amount is None else amount + self.carried.get(unit)

    def spent(self, unit: str) -> float:
        return self.used.get(unit) + self.committed.get(unit)

    def left(self, unit: str) -> float | None:
        allowance = self.allowance(unit)
        return None if allowance is None else allowance - self.spent(unit)

    def ceiling(self, unit: str) -> float | None:
        """The allowance with the overdraft the site allows."""
        allowance = self.allowance(unit)
        if allowance is None:
            return None
        return allowance + max(allowance, 0) * self.budget.overdraft_percent / 100

    def percent(self) -> float:
        """The largest share of an allowance spent, in percent."""
        worst = 0.0
        for unit in UNITS:
            allowance = self.allowance(unit)
            if allowance is None:
                continue
            spent = self.spent(unit)
            worst = max(worst, math.inf if allowance <= 0 < spent else
                        100 * spent / allowance if allowance > 0 else 0.0)  # fmt: skip
        return worst

    def exhausted(self) -> bool:
        """Nothing more may be spent (the overdraft too): a queued job waits."""
        return any(
            (ceiling := self.ceiling(unit)) is not None and self.spent(unit) >= ceiling - EPS
            for unit in UNITS
        )

    def refusal(self, asked: Figures, zone: tzinfo) -> str | None:
        """Why `asked` more does not fit (None: it fits), with what is left and when it renews."""
        for unit in UNITS:
            ceiling = self.ceiling(unit)
            if ceiling is None or self.spent(unit) + asked.get(unit) <= ceiling + EPS:
                continue
            words = UNIT_WORDS[unit]
            left = max(0.0, self.left(unit) or 0.0)
            text = (
                f"This would overrun the budget of {self.budget.subject} for "
                f"{self.period.label}: it needs {asked.get(unit):.2f} {words}, and "
                f"{left:.2f} of {self.allowance(unit):.2f} {words} are left (used "
                f"{self.used.get(unit):.2f}, booked ahead {self.committed.get(unit):.2f})."
            )
            if self.budget.overdraft_percent:
                room = max(0.0, ceiling - self.spent(unit))
                text += (
                    f" An overdraft of {self.budget.overdraft_percent:g} % is allowed: "
                    f"{room:.2f} {words} more at most."
                )
            return f"{text} {self.renewal(zone)}"
        return None

    def renewal(self, zone: tzinfo) -> str:
        """When the budget renews, in words."""
        when = describe_instant(self.period.end, zone)
        if self.period.renews:
            return f"It renews on {when} ({zone}); a gpuhive admin may raise it before."
        return f"It ends on {when} ({zone}) and does not renew; ask a gpuhive admin to extend it."

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "budget": self.budget.to_json(),
            "period": self.period.label,
            "period_start": self.period.start.isoformat(),
            "period_end": self.period.end.isoformat(),
            "renews_at": self.period.end.isoformat() if self.period.renews else None,
            "percent": round(self.percent(), 2) if math.isfinite(self.percent()) else None,
            "exhausted": self.exhausted(),
        }
        for unit in UNITS:
            allowance = self.allowance(unit)
            out[unit] = None if allowance is None else {
                "allowance": round(allowance, 4),
                "used": round(self.used.get(unit), 4),
                "committed": round(self.committed.get(unit), 4),
                "carried": round(self.carried.get(unit), 4),
                "left": round(allowance - self.spent(unit), 4),
                "overdraft_until": round(self.ceiling(unit) or 0.0, 4),
            }  # fmt: skip
        return out


def parse_budget(data: Mapping[str, Any]) -> Budget:
    """A budget from checked JSON fields (the REST body has typed them)."""
    return Budget(**{k: v for k, v in data.items() if v is not None}).checked()


_DAY = timedelta(days=1)


def _midnight(day: date, zone: tzinfo) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone)


def _add_months(day: date, months: int) -> date:
    index = day.month - 1 + months
    return date(day.year + index // 12, index % 12 + 1, 1)
