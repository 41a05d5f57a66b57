"""The limit rules as pure functions: figures, refusals and their sentences, flags."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpuhive.bookings.limits import (
    LimitExceeded,
    LimitInvalid,
    Proposal,
    busiest_week,
    check,
    local_span,
    one_by_one,
    over_limits,
    peak,
    worst_week,
)
from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.model import Identity
from jupyter_gpuhive.model.limits import Effective, Limits, LimitTable, Tier, apply_tiers
from jupyter_gpuhive.store.limits import Held as Span

UTC = timezone.utc
ZONE = ZoneInfo("Europe/Warsaw")
NOW = datetime(2026, 11, 16, 23, 0, tzinfo=UTC)  # Nov 17 00:00 in Warsaw
H = timedelta(hours=1)


def limits(**values: object) -> Effective:
    return LimitTable(default=Limits.parse(values)).resolve(Identity("alice"))


def test_precedence_user_over_most_generous_group_over_default() -> None:
    table = LimitTable(
        default=Limits(gpus=2, upcoming=3, gpu_hours_week=10),
        groups={"phd": Limits(gpus=4), "lab": Limits(gpus=6, upcoming=1)},
        users={"alice": Limits(gpus=1)},
    )
    alice = table.resolve(Identity("alice", frozenset({"phd", "lab"})))
    assert alice.limits.gpus == 1 and alice.sources["gpus"] == "alice's own limit"
    bob = table.resolve(Identity("bob", frozenset({"phd", "lab"})))
    assert (bob.limits.gpus, bob.limits.upcoming, bob.limits.gpu_hours_week) == (6, 1, 10)
    assert bob.sources["gpus"] == "the limit of group lab"
    assert bob.sources["gpu_hours_week"] == "the site default"
    carol = table.resolve(Identity("carol"))
    assert carol.limits == Limits(gpus=2, upcoming=3, gpu_hours_week=10)


def test_the_issues_example_sentence() -> None:
    """6 of 8 GPU-hours held in the week of Nov 17–23; a 4 GPU-hour booking is refused."""
    start = NOW + timedelta(hours=8)  # Nov 17 08:00 in Warsaw
    held = [Span(start, start + 3 * H, 2, reservation=1)]
    with pytest.raises(LimitExceeded) as caught:
        check(limits(gpu_hours_week=8), Proposal(start + 5 * H, start + 7 * H, 2), held, NOW, ZONE)
    error = caught.value
    assert error.status == 409
    assert "You hold 6 of your 8 GPU-hours for Nov 17–23; this booking needs 4" in error.message
    assert "at most 2 would fit (e.g. 1h on 2 GPUs)" in error.message
    assert error.details["limit"] == "gpu_hours_week"
    assert (error.details["current"], error.details["needed"], error.details["fits"]) == (6, 4, 2)
    # what fits, fits
    check(limits(gpu_hours_week=8), Proposal(start + 5 * H, start + 6 * H, 2), held, NOW, ZONE)


def test_rolling_window_counts_the_past_and_finds_the_worst_week() -> None:
    past = Span(NOW - timedelta(days=6), NOW - timedelta(days=6) + 5 * H, 1, reservation=1)
    later = Span(NOW + 12 * H, NOW + 16 * H, 1, reservation=2)
    p = Proposal(NOW + 2 * H, NOW + 4 * H, 1)
    start, have, need = worst_week([past, later], p)
    assert have == pytest.approx(9) and need == pytest.approx(2)
    assert start <= past.start + 5 * H and start + timedelta(days=7) >= later.end
    with pytest.raises(LimitExceeded):
        check(limits(gpu_hours_week=10), p, [past, later], NOW, ZONE)
    check(limits(gpu_hours_week=11), p, [past, later], NOW, ZONE)
    # a week later the past booking has rolled out of every window touching the proposal
    far = Proposal(NOW + timedelta(days=8), NOW + timedelta(days=8) + 2 * H, 1)
    check(limits(gpu_hours_week=6), far, [past, later], NOW, ZONE)


def test_gpus_at_once_and_back_to_back() -> None:
    a = Span(NOW + H, NOW + 3 * H, 3, reservation=1)
    b = Span(NOW + 3 * H, NOW + 5 * H, 3, reservation=2)
    assert peak([a, b], NOW, NOW + 6 * H)[0] == 3  # back to back: never 6 at once
    check(limits(gpus=4), Proposal(NOW + 2 * H, NOW + 4 * H, 1), [a, b], NOW, ZONE)
    with pytest.raises(LimitExceeded) as caught:
        check(limits(gpus=4), Proposal(NOW + 2 * H, NOW + 4 * H, 2), [a, b], NOW, ZONE)
    assert "You would hold 5 GPUs at once" in caught.value.message
    assert (
        "You hold 3 then and this booking needs 2, so at most 1 would fit" in caught.value.message
    )


def test_upcoming_only_on_create_and_queued_jobs_never_count_there() -> None:
    held = [Span(NOW + H, NOW + 2 * H, 1, reservation=1),
            Span(NOW - H, NOW + 5 * H, 1, reservation=None)]  # fmt: skip
    with pytest.raises(
        LimitExceeded, match="You have 1 upcoming reservation and may have at most 1"
    ):
        check(limits(upcoming=1), Proposal(NOW + 3 * H, NOW + 4 * H, 1), held, NOW, ZONE)
    check(limits(upcoming=1), Proposal(NOW + 3 * H, NOW + 4 * H, 1, editing=1), held, NOW, ZONE,
          new=False)  # fmt: skip


def test_length_and_horizon_are_422_with_the_source() -> None:
    table = LimitTable(
        groups={"phd": Limits(longest=timedelta(hours=4), horizon=timedelta(days=7))}
    )
    eff = table.resolve(Identity("bob", frozenset({"phd"})))
    with pytest.raises(LimitInvalid) as caught:
        check(eff, Proposal(NOW + H, NOW + 6 * H, 1), [], NOW, ZONE)
    assert caught.value.status == 422 and "the limit of group phd" in caught.value.message
    with pytest.raises(LimitInvalid, match="at most 7d ahead"):
        check(eff, Proposal(NOW + timedelta(days=8), NOW + timedelta(days=8, hours=1), 1), [],
              NOW, ZONE)  # fmt: skip


def test_tiers_scale_a_limit_and_say_why() -> None:
    eff = limits(gpu_hours_week=40)
    tiers = (Tier(30, "gpu_hours_week", 0.5),)
    assert apply_tiers(eff, tiers, 45.0, "30 days").limits.gpu_hours_week == 40
    low = apply_tiers(eff, tiers, 12.0, "30 days")
    assert low.limits.gpu_hours_week == 20
    held = [Span(NOW + H, NOW + 11 * H, 2, reservation=1)]
    with pytest.raises(LimitExceeded) as caught:
        check(low, Proposal(NOW + 12 * H, NOW + 13 * H, 1), held, NOW, ZONE)
    assert "efficiency over the last 30 days is 12 %, below 30 %" in caught.value.message


def test_lowered_limit_flags_the_latest_bookings_over_it() -> None:
    held = [Span(NOW + i * 2 * H, NOW + (i * 2 + 1) * H, 2, reservation=10 + i) for i in range(4)]
    held.append(Span(NOW - 5 * H, NOW - 3 * H, 2, reservation=9))  # past: kept
    flags = over_limits(limits(gpu_hours_week=8), held, NOW, ZONE)
    assert sorted(flags) == [12, 13]  # 4 past + 2 + 2 = 8 kept
    assert "GPU-hours" in flags[12] and flags[12].startswith("Over the owner's limits")


def test_bad_limits_are_refused_in_words() -> None:
    with pytest.raises(Invalid, match="Unknown limit"):
        Limits.parse({"gpu": 3})
    with pytest.raises(Invalid, match="whole number"):
        Limits.parse({"gpus": 2.5})
    with pytest.raises(Invalid, match="from 0"):
        Limits.parse({"gpu_hours_week": -1})
    with pytest.raises(Invalid, match="must be longer than zero"):
        Limits.parse({"longest": "0h"})
    assert Limits.parse({"longest": "2d", "gpus": None}) == Limits(longest=timedelta(days=2))


def test_local_spans() -> None:
    start = datetime(2026, 11, 16, 23, 0, tzinfo=UTC)
    assert local_span(start, start + timedelta(days=7), ZONE) == "Nov 17–23"
    assert local_span(start + timedelta(days=14), start + timedelta(days=21), ZONE) == "Dec 1–7"
    assert (
        local_span(start + timedelta(days=12), start + timedelta(days=19), ZONE) == "Nov 29–Dec 5"
    )
    assert local_span(start + 10 * H, start + 12 * H, ZONE) == "Nov 17 10:00–12:00"


@settings(max_examples=300, deadline=None)
@given(
    spans=st.lists(
        st.tuples(
            st.integers(-48, 24 * 20),  # start, hours from NOW
            st.integers(1, 72),  # length in hours
            st.integers(1, 4),  # GPUs
            st.booleans(),  # a queued job rather than a reservation
        ),
        max_size=25,
    ),
    gpus=st.none() | st.integers(0, 12),
    hours=st.none() | st.integers(0, 400),
    upcoming=st.none() | st.integers(0, 20),
    longest=st.none() | st.integers(1, 80),
)
def test_the_shortcut_of_flags_agrees_with_checking_one_by_one(
    spans: list[tuple[int, int, int, bool]],
    gpus: int | None,
    hours: int | None,
    upcoming: int | None,
    longest: int | None,
) -> None:
    """`over_limits` skips the quadratic check when all that is held fits; it must flag
    exactly what checking each reservation in turn flags."""
    held = [
        Span(NOW + a * H, NOW + (a + n) * H, g, job=i if job else None,
             reservation=None if job else i)
        for i, (a, n, g, job) in enumerate(spans, start=1)
    ]  # fmt: skip
    values = {"gpus": gpus, "gpu_hours_week": hours, "upcoming": upcoming,
              "longest": f"{longest}h" if longest else None}  # fmt: skip
    effective = limits(**{k: v for k, v in values.items() if v is not None})
    assert over_limits(effective, held, NOW, ZONE) == one_by_one(effective, held, NOW, ZONE)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 24 * 30), st.integers(1, 100), st.integers(1, 3)),
                max_size=15))  # fmt: skip
def test_the_busiest_week_is_the_most_of_every_window(spans: list[tuple[int, int, int]]) -> None:
    """Against a brute force over every window starting on the hour (spans are on hours)."""
    held = [Span(NOW + a * H, NOW + (a + n) * H, g) for a, n, g in spans]

    def window(t: int) -> float:
        a, b = NOW + t * H, NOW + (t + 168) * H
        return sum(s.gpus * max(0.0, (min(s.end, b) - max(s.start, a)) / H) for s in held)

    brute = max((window(t) for t in range(-200, 24 * 31 + 100)), default=0.0)
    assert busiest_week(held) == pytest.approx(brute)
