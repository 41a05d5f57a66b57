"""Bodies, query parameters and answers of the budget endpoints (bookings/budgets.py)."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any

from pydantic import Field

from ....model.budgets import MAX_AMOUNT, PERIODS, SCOPES, Budget
from .bodies import Closed
from .fairshare import _number
from .fields import FLAG, Check, MaybeInstant, choice, maybe, refuse, text
from .queries import Query
from .replies import Reply


def _day(value: Any) -> date:
    if not isinstance(value, str):
        raise refuse("{field} must be a day such as '2026-12-01'.", 400)
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise refuse(f"{{field}} must be a day such as '2026-12-01', not {value!r}.") from None


def _percents(value: Any) -> tuple[float, ...]:
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in value
    ):
        raise refuse("{field} must be a list of percentages such as [80, 100].", 400)
    return tuple(float(v) for v in value)


DAY = Check(_day, {"type": "string", "format": "date", "examples": ["2026-12-01"]})
PERCENTS = Check(_percents, {"type": "array", "items": {"type": "number"}})
Amount = Annotated[float | None, maybe(_number(0, MAX_AMOUNT))]


class BudgetBody(Closed):
    """A budget of a group or a user per period (site admins)."""

    unknown = (
        "Unknown field(s): {names}; a budget has scope, name, period, starts, ends, gpu_hours, "
        "kwh, carry_over, overdraft_percent, warn_at, kwh_per_gpu_hour."
    )

    scope: Annotated[str, choice(SCOPES)] = Field(description="group or user")
    name: Annotated[str, text(128, required=True)] = Field(description="The group or user")
    period: Annotated[str, choice(PERIODS)] = Field("month", description="month, quarter, dates")
    starts: Annotated[date | None, maybe(DAY)] = Field(None, description="First day (dates)")
    ends: Annotated[date | None, maybe(DAY)] = Field(None, description="Last day, included")
    gpu_hours: Amount = Field(None, description="GPU-hours per period")
    kwh: Amount = Field(None, description="kWh per period")
    carry_over: Annotated[bool, FLAG] = Field(False, description="What is left moves on")
    overdraft_percent: Annotated[float, _number(0, 1000)] = Field(
        0.0, description="How far over the allowance bookings may go, in percent (site admins)"
    )
    warn_at: Annotated[tuple[float, ...], PERCENTS] = Field(
        (80.0, 100.0), description="Percentages at which the holders are warned, once each"
    )
    kwh_per_gpu_hour: Annotated[float, _number(0, 100)] = Field(
        0.3, description="The energy a booked GPU-hour counts until it is measured"
    )

    def value(self) -> Budget:
        return Budget(
            scope=self.scope, name=self.name, period=self.period, gpu_hours=self.gpu_hours,
            kwh=self.kwh, carry_over=self.carry_over, overdraft_percent=self.overdraft_percent,
            starts=self.starts, ends=self.ends, warn_at=self.warn_at,
            kwh_per_gpu_hour=self.kwh_per_gpu_hour,
        )  # fmt: skip


class BudgetQuery(Query):
    at: MaybeInstant = Field(None, description="An instant of the period to show (default now)")


class BudgetReply(Reply):
    id: int
    scope: str
    name: str
    period: str
    standing: dict[str, Any] | None = Field(
        description="used, committed, carried, left per unit; renews_at (null: outside dates)"
    )


class BudgetList(Reply):
    budgets: list[BudgetReply]


class BudgetDeleted(Reply):
    deleted: int


class StatementReply(Reply):
    budget: dict[str, Any]
    standing: dict[str, Any]
    rows: list[dict[str, Any]] = Field(description="user, host, kind, gpu_hours, kwh")
