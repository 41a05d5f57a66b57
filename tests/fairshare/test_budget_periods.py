"""Budget periods and standings as values (model/budgets.py): months, quarters and dates in
the site's time, carry-over, overdraft, and the refusal's words."""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.model import UTC
from jupyter_gpuhive.model.budgets import Budget, Figures, Standing

ZONE = ZoneInfo("Europe/Warsaw")


def test_periods_are_site_local_months_quarters_and_dates() -> None:
    month = Budget("group", "physics", "month", gpu_hours=10)
    # 23:30 UTC on Jan 31 is already February in Warsaw
    late = datetime(2030, 1, 31, 23, 30, tzinfo=UTC)
    period = month.period_at(late, ZONE)
    assert period is not None and period.label == "2030-02"
    assert period.start == datetime(2030, 2, 1, tzinfo=ZONE)
    assert period.end == datetime(2030, 3, 1, tzinfo=ZONE) and period.renews
    quarter = Budget("group", "physics", "quarter", kwh=5).period_at(late, ZONE)
    assert quarter is not None and quarter.label == "2030-Q1"
    assert quarter.end == datetime(2030, 4, 1, tzinfo=ZONE)
    december = Budget("user", "a", "quarter", gpu_hours=1).period_at(
        datetime(2030, 12, 15, tzinfo=UTC), ZONE
    )
    assert december is not None and december.end == datetime(2031, 1, 1, tzinfo=ZONE)
    dates = Budget(
        "user", "a", "dates", gpu_hours=1, starts=date(2030, 1, 10), ends=date(2030, 1, 20)
    )
    inside = dates.period_at(datetime(2030, 1, 20, 22, tzinfo=UTC), ZONE)  # 23:00 in Warsaw
    assert inside is not None and not inside.renews
    assert dates.period_at(datetime(2030, 1, 20, 23, 30, tzinfo=UTC), ZONE) is None
    # a booking over a month's end touches two periods, each counting its own hours
    spans = month.periods(
        datetime(2030, 1, 31, 20, tzinfo=UTC), datetime(2030, 2, 1, 1, tzinfo=UTC), ZONE
    )
    assert [p.label for p in spans] == ["2030-01", "2030-02"]
    hours = [
        p.hours_of(datetime(2030, 1, 31, 20, tzinfo=UTC), datetime(2030, 2, 1, 1, tzinfo=UTC))
        for p in spans
    ]
    assert hours == [3.0, 2.0]
    assert month.previous(spans[1], ZONE) == spans[0]


def test_standing_left_overdraft_carry_and_refusal_in_words() -> None:
    budget = Budget("group", "physics", "month", gpu_hours=10, overdraft_percent=20)
    period = budget.period_at(datetime(2030, 1, 15, tzinfo=UTC), ZONE)
    assert period is not None
    standing = Standing(budget, period, used=Figures(4, 1), committed=Figures(5, 1.5),
                        carried=Figures(-2, 0))  # fmt: skip
    assert standing.allowance("gpu_hours") == 8 and standing.left("gpu_hours") == -1
    assert standing.ceiling("gpu_hours") == pytest.approx(9.6)
    assert standing.allowance("kwh") is None and standing.percent() == pytest.approx(112.5)
    assert standing.refusal(Figures(0.5, 0), ZONE) is None  # 9.5 of 9.6
    words = standing.refusal(Figures(1, 0), ZONE)
    assert words is not None and words.startswith(
        "This would overrun the budget of group physics for 2030-01: it needs 1.00 GPU-hours, "
        "and 0.00 of 8.00 GPU-hours are left (used 4.00, booked ahead 5.00)."
    )
    assert "An overdraft of 20 % is allowed: 0.60 GPU-hours more at most." in words
    assert "It renews on Fri 2030-02-01 00:00 (Europe/Warsaw)" in words
    assert not standing.exhausted()
    assert Standing(budget, period, used=Figures(12, 0)).exhausted()  # 10 + 20 %


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"scope": "team"}, "'scope' must be group or user"),
        ({"gpu_hours": None}, "'gpu_hours', 'kwh' or both"),
        ({"period": "week"}, "'period' must be month, quarter or dates"),
        ({"gpu_hours": float("nan")}, "'gpu_hours' must be a number"),
        ({"overdraft_percent": -1}, "'overdraft_percent'"),
        ({"warn_at": (80, 2000)}, "'warn_at'"),
        ({"name": "  "}, "needs the group's 'name'"),
    ],
)
def test_a_budget_that_makes_no_sense_is_refused(fields: dict, words: str) -> None:
    base = {"scope": "group", "name": "physics", "gpu_hours": 10.0}
    with pytest.raises(Invalid, match=words.replace("(", r"\(")):
        Budget(**{**base, **fields}).checked()
    assert Budget(**base, warn_at=(100, 80, 80)).checked().warn_at == (80, 100)
