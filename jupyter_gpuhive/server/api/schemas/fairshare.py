"""Bodies, query parameters and answers of the fair-share endpoints: limits, tiers, usage
scores and the accounting report (bookings.fairshare)."""

from __future__ import annotations

import math
from datetime import date
from typing import Annotated, Any

from pydantic import Field

from ....bookings.accounting import parse_month
from ....model.limits import MAX_COUNT, SCALABLE, Limits, Tier
from .bodies import Closed
from .fields import Check, MaybeDuration, choice, domain, maybe, refuse, text, whole
from .queries import Query, Text, _whole
from .replies import Reply


def _number(low: float, high: float, *, above: bool = False) -> Check:
    """A JSON number (not a boolean) from `low` (or above it) to `high`."""

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise refuse("{field} must be a number.", 400)
        if not math.isfinite(value) or value > high or value < low or (above and value == low):
            bound = f"above {low:g}" if above else f"from {low:g}"
            raise refuse(f"{{field}} must be a number {bound} to {high:g}.")
        return float(value)

    schema: dict[str, Any] = {"type": "number", "maximum": high}
    schema["exclusiveMinimum" if above else "minimum"] = low
    return Check(check, schema)


def _month(value: Any) -> date | None:
    return None if value in (None, "") else domain(parse_month)(value)


MONTH = Check(_month, {"type": "string", "pattern": r"^(\d{4}-\d{1,2})?$", "examples": ["2026-11"]})
Month = Annotated[date | None, MONTH]
Count = Annotated[int | None, maybe(whole(0, MAX_COUNT))]


class LimitValues(Closed):
    """Limits of one scope; null or absent leaves a limit to the next level."""

    unknown = (
        "Unknown limit(s): {names}; the limits are gpus, gpu_hours_week, upcoming, longest, "
        "horizon."
    )

    gpus: Count = Field(None, description="GPUs held at once")
    gpu_hours_week: Annotated[float | None, maybe(_number(0, MAX_COUNT))] = Field(
        None, description="GPU-hours booked in any rolling 7 days"
    )
    upcoming: Count = Field(None, description="Reservations not yet ended")
    longest: MaybeDuration = Field(None, description="The longest reservation")
    horizon: MaybeDuration = Field(None, description="How far ahead a reservation may start")

    def value(self) -> Limits:
        return Limits(self.gpus, self.gpu_hours_week, self.upcoming, self.longest, self.horizon)


class LimitsBody(Closed):
    """Set the limits of the site default, a group or a user (admins)."""

    scope: Annotated[str, choice(("default", "group", "user"))]
    name: Annotated[str | None, maybe(text(128))] = Field(
        None, description="The group's or user's name (not for 'default')"
    )
    limits: LimitValues

    def value(self) -> tuple[str, str, Limits]:
        return self.scope, self.name or "", self.limits.value()


class TierValue(Closed):
    """Below `efficiency_below` percent efficiency, `limit` is multiplied by `factor`."""

    efficiency_below: Annotated[float, _number(0, 100, above=True)]
    limit: Annotated[str, choice(SCALABLE)] = "gpu_hours_week"
    factor: Annotated[float, _number(0, 1)] = 0.5

    def value(self) -> Tier:
        return Tier(self.efficiency_below, self.limit, self.factor)


class TiersBody(Closed):
    """Replace the tiers (admins); an empty list turns configured tiers off."""

    tiers: list[TierValue]

    def value(self) -> tuple[Tier, ...]:
        return tuple(t.value() for t in self.tiers)


class LimitScopeQuery(Query):
    scope: Text = Field(None, description="default, group or user")
    name: Text = Field(None, description="The group's or user's name")


class ScoresQuery(Query):
    days: Annotated[int | None, _whole(1, 400)] = Field(
        None, description="The window in days, up to now (default: the site's, 30 days)"
    )
    user: Text = Field(None, description="Only this user (others than oneself: admins)")


class ReportQuery(Query):
    month: Month = Field(None, description="The month, e.g. 2026-11 (default: this month)")
    until: Month = Field(None, description="The last month of a longer report (at most 24)")


class LimitsReply(Reply):
    mine: dict[str, Any] = Field(description="The requester's limits, sources and figures")
    table: dict[str, Any] | None = Field(None, description="Admins: the limits in force")
    configured: dict[str, Any] | None = Field(None, description="Admins: from configuration")


class LimitsChanged(Reply):
    flag_changes: dict[str, str | None] = Field(
        description="Reservations newly flagged (reason) or cleared (null)"
    )


class ScoresReply(Reply):
    start: str
    end: str
    scores: list[dict[str, Any]]


class ReportReply(Reply):
    months: list[str]
    timezone: str
    rows: list[dict[str, Any]]
    check: dict[str, Any]
