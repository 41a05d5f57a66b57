"""Access rules: coverage semantics in the site time zone (pure, no database)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.bookings.access import (
    Rule,
    Window,
    allowed_spans,
    first_gap,
    merge,
    parse_rule,
    parse_window,
    uncovered,
)
from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.model import UTC, Gpu, Identity

WARSAW = ZoneInfo("Europe/Warsaw")
ALICE = Identity("alice", frozenset({"phd"}))
CAROL = Identity("carol", frozenset({"staff"}))
BOSS = Identity("boss", frozenset({"admins"}), is_admin=True)
G10 = Gpu(1, "gpu1", 0, "GPU-aaa")
G11 = Gpu(2, "gpu1", 1, "GPU-bbb")
G20 = Gpu(5, "gpu2", 0, "GPU-ccc")

# 2026-05-05 is a Tuesday (CEST, UTC+2).
TUE = date(2026, 5, 5)


def local(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=WARSAW)


def rule(**spec: object) -> Rule:
    return parse_rule({"name": "r", **spec})


def weekdays(start: str = "08:00", end: str = "16:00", **spec: object) -> Rule:
    return rule(windows=[{"days": ["mon-fri"], "start": start, "end": end}], **spec)


def gaps(rules: list[Rule], who: Identity, gpus: list[Gpu], start: datetime, end: datetime):
    return uncovered(rules, who, gpus, start, end, WARSAW)


def test_no_rules_everyone_may_book_everything() -> None:
    start = local(TUE, 3)
    assert gaps([], ALICE, [G10, G11, G20], start, start + timedelta(days=3)) == []
    assert gaps([], CAROL, [G20], local(date(2026, 5, 9), 0), local(date(2026, 5, 10), 0)) == []


def test_subjects_groups_users_and_everyone() -> None:
    start, end = local(TUE, 9), local(TUE, 12)
    by_group = weekdays(groups=["phd"])
    assert gaps([by_group], ALICE, [G10], start, end) == []
    assert gaps([by_group], CAROL, [G10], start, end) == [(G10, (start, end))]
    by_user = weekdays(users=["carol"])
    assert gaps([by_user], CAROL, [G10], start, end) == []
    assert gaps([by_user], ALICE, [G10], start, end) != []
    everyone = weekdays(users=["*"])
    assert gaps([everyone], ALICE, [G10], start, end) == []
    assert gaps([everyone], CAROL, [G10], start, end) == []
    assert everyone.applies_to(Identity("nobody"))
    assert not by_group.applies_to(Identity("nobody"))


def test_resources_hosts_and_gpus() -> None:
    start, end = local(TUE, 9), local(TUE, 10)
    on_host = weekdays(groups=["phd"], hosts=["gpu2"])
    assert gaps([on_host], ALICE, [G20], start, end) == []
    assert [g for g, _ in gaps([on_host], ALICE, [G10, G20], start, end)] == [G10]
    by_ref = weekdays(groups=["phd"], gpus=["gpu1:1"])
    assert [g for g, _ in gaps([by_ref], ALICE, [G10, G11], start, end)] == [G10]
    by_uuid = weekdays(groups=["phd"], gpus=["GPU-aaa"])
    assert [g for g, _ in gaps([by_uuid], ALICE, [G10, G11], start, end)] == [G11]
    assert weekdays(groups=["phd"]).covers_gpu(G20)


def test_weekday_window_allows_inside_and_refuses_the_part_outside() -> None:
    rules = [weekdays(groups=["phd"])]
    assert gaps(rules, ALICE, [G10], local(TUE, 9), local(TUE, 12)) == []
    assert gaps(rules, ALICE, [G10], local(TUE, 8), local(TUE, 16)) == []
    # Tue 15–17: the hour 16–17 is not covered, and that is the gap reported.
    found = gaps(rules, ALICE, [G10, G11], local(TUE, 15), local(TUE, 17))
    assert found == [
        (G10, (local(TUE, 16), local(TUE, 17))),
        (G11, (local(TUE, 16), local(TUE, 17))),
    ]
    # A weekend day is outside the window; so is the night between two weekdays.
    sat = date(2026, 5, 9)
    assert gaps(rules, ALICE, [G10], local(sat, 9), local(sat, 10)) != []
    assert gaps(rules, ALICE, [G10], local(TUE, 15), local(TUE + timedelta(days=1), 9)) == [
        (G10, (local(TUE, 16), local(TUE + timedelta(days=1), 8)))
    ]


def test_adjacent_windows_and_rules_chain() -> None:
    mon = date(2026, 5, 4)
    morning = rule(groups=["phd"], windows=[{"days": ["mon"], "start": "08:00", "end": "12:00"}])
    afternoon = rule(users=["alice"], windows=[{"days": "mon", "start": "12:00", "end": "18:00"}])
    assert gaps([morning, afternoon], ALICE, [G10], local(mon, 10), local(mon, 14)) == []
    assert gaps([morning], ALICE, [G10], local(mon, 10), local(mon, 14)) == [
        (G10, (local(mon, 12), local(mon, 14)))
    ]
    both = rule(
        groups=["phd"],
        windows=[
            {"days": ["mon"], "start": "08:00", "end": "12:00"},
            {"days": ["mon"], "start": "12:00", "end": "18:00"},
        ],
    )
    assert gaps([both], ALICE, [G10], local(mon, 8), local(mon, 18)) == []
    # Whole days chain across midnight with '24:00'.
    days = rule(
        groups=["phd"], windows=[{"days": ["mon", "tue"], "start": "00:00", "end": "24:00"}]
    )
    assert gaps([days], ALICE, [G10], local(mon, 20), local(TUE, 4)) == []


def test_overnight_window() -> None:
    nights = rule(groups=["phd"], windows=[{"days": ["mon-sun"], "start": "22:00", "end": "06:00"}])
    wed = TUE + timedelta(days=1)
    assert gaps([nights], ALICE, [G10], local(TUE, 23), local(wed, 5)) == []
    assert gaps([nights], ALICE, [G10], local(TUE, 22), local(wed, 6)) == []
    assert gaps([nights], ALICE, [G10], local(TUE, 21), local(TUE, 23)) == [
        (G10, (local(TUE, 21), local(TUE, 22)))
    ]
    assert gaps([nights], ALICE, [G10], local(wed, 5), local(wed, 7)) == [
        (G10, (local(wed, 6), local(wed, 7)))
    ]
    # A Monday-night window continues into Tuesday morning.
    monday_night = rule(
        groups=["phd"], windows=[{"days": ["mon"], "start": "22:00", "end": "06:00"}]
    )
    assert gaps([monday_night], ALICE, [G10], local(TUE, 1), local(TUE, 3)) == []
    assert gaps([monday_night], ALICE, [G10], local(wed, 1), local(wed, 3)) != []


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_window_offsets_on_both_sides_of_daylight_saving_changes() -> None:
    office = Window(frozenset(range(5)), time(8), time(16))
    # Spring forward on Sun 2026-03-29: CET (+1) before, CEST (+2) after.
    assert office.spans_on(date(2026, 3, 27), WARSAW) == (utc(2026, 3, 27, 7), utc(2026, 3, 27, 15))
    assert office.spans_on(date(2026, 3, 30), WARSAW) == (utc(2026, 3, 30, 6), utc(2026, 3, 30, 14))
    # Fall back on Sun 2026-10-25: CEST (+2) before, CET (+1) after.
    assert office.spans_on(date(2026, 10, 23), WARSAW) == (
        utc(2026, 10, 23, 6),
        utc(2026, 10, 23, 14),
    )
    assert office.spans_on(date(2026, 10, 26), WARSAW) == (
        utc(2026, 10, 26, 7),
        utc(2026, 10, 26, 15),
    )
    assert office.spans_on(date(2026, 3, 29), WARSAW) is None  # a Sunday
    # An overnight window across the change is 7 h in March and 9 h in October.
    night = Window(frozenset({5}), time(22), time(6))
    march = night.spans_on(date(2026, 3, 28), WARSAW)
    assert march == (utc(2026, 3, 28, 21), utc(2026, 3, 29, 4))
    october = night.spans_on(date(2026, 10, 24), WARSAW)
    assert october == (utc(2026, 10, 24, 20), utc(2026, 10, 25, 5))
    # Coverage follows wall-clock time across the change: 08:00–16:00 local every day.
    daily = rule(groups=["phd"], windows=[{"days": "mon-sun", "start": "08:00", "end": "16:00"}])
    assert gaps([daily], ALICE, [G10], utc(2026, 3, 28, 7), utc(2026, 3, 28, 15)) == []
    assert gaps([daily], ALICE, [G10], utc(2026, 3, 29, 6), utc(2026, 3, 29, 14)) == []
    assert gaps([daily], ALICE, [G10], utc(2026, 3, 29, 5), utc(2026, 3, 29, 6)) == [
        (G10, (utc(2026, 3, 29, 5), utc(2026, 3, 29, 6)))
    ]
    assert gaps([daily], ALICE, [G10], utc(2026, 10, 25, 7), utc(2026, 10, 25, 15)) == []
    assert gaps([daily], ALICE, [G10], utc(2026, 10, 24, 6), utc(2026, 10, 24, 14)) == []
    assert gaps([daily], ALICE, [G10], utc(2026, 10, 25, 6), utc(2026, 10, 25, 7)) == [
        (G10, (utc(2026, 10, 25, 6), utc(2026, 10, 25, 7)))
    ]
    # The whole Saturday night across the change, booked in UTC.
    nights = rule(groups=["phd"], windows=[{"days": ["sat"], "start": "22:00", "end": "06:00"}])
    assert gaps([nights], ALICE, [G10], utc(2026, 3, 28, 21), utc(2026, 3, 29, 4)) == []
    assert gaps([nights], ALICE, [G10], utc(2026, 10, 24, 20), utc(2026, 10, 25, 5)) == []
    assert gaps([nights], ALICE, [G10], utc(2026, 10, 24, 20), utc(2026, 10, 25, 6)) == [
        (G10, (utc(2026, 10, 25, 5), utc(2026, 10, 25, 6)))
    ]


def test_validity_dates_are_whole_local_days() -> None:
    june = rule(groups=["phd"], valid_from="2026-06-01", valid_until="2026-06-30")
    assert gaps([june], ALICE, [G10], local(date(2026, 6, 1), 0), local(date(2026, 7, 1), 0)) == []
    assert gaps([june], ALICE, [G10], local(date(2026, 5, 31), 23), local(date(2026, 6, 1), 1)) == [
        (G10, (local(date(2026, 5, 31), 23), local(date(2026, 6, 1), 0)))
    ]
    assert gaps([june], ALICE, [G10], local(date(2026, 6, 30), 23), local(date(2026, 7, 1), 1)) == [
        (G10, (local(date(2026, 7, 1), 0), local(date(2026, 7, 1), 1)))
    ]
    with_window = weekdays(groups=["phd"], valid_from="2026-05-06")
    assert gaps([with_window], ALICE, [G10], local(TUE, 9), local(TUE, 10)) != []
    wed = TUE + timedelta(days=1)
    assert gaps([with_window], ALICE, [G10], local(wed, 9), local(wed, 10)) == []


def test_admins_bypass_rules() -> None:
    rules = [weekdays(groups=["phd"], hosts=["gpu1"])]
    sat = date(2026, 5, 9)
    assert gaps(rules, BOSS, [G10, G20], local(sat, 0), local(sat, 23)) == []
    assert gaps(rules, Identity("boss", frozenset({"admins"})), [G10], local(sat, 0), local(sat, 1))


def test_allowed_spans_merge_and_gap_helpers() -> None:
    a, b, c, d = (utc(2026, 1, 1, h) for h in (1, 2, 3, 4))
    assert merge([(c, d), (a, b), (b, c)]) == [(a, d)]
    assert merge([(a, b), (c, d)]) == [(a, b), (c, d)]
    assert merge([(a, d), (b, c)]) == [(a, d)]
    assert first_gap([(a, b), (c, d)], a, d) == (b, c)
    assert first_gap([(a, d)], b, c) is None
    assert first_gap([], a, b) == (a, b)
    assert first_gap([(b, c)], a, d) == (a, b)
    spans = allowed_spans(
        [weekdays(groups=["phd"])], ALICE, G10, local(TUE, 0), local(TUE, 23), WARSAW
    )
    assert spans == [(local(TUE, 8).astimezone(UTC), local(TUE, 16).astimezone(UTC))]


def test_parse_rule_round_trip_and_day_ranges() -> None:
    parsed = parse_rule(
        {
            "name": " nights ",
            "groups": ["phd"],
            "users": ["carol"],
            "hosts": ["gpu1"],
            "windows": [{"days": ["fri-mon"], "start": "8:00", "end": "24:00"}, {"days": [2]}],
            "valid_from": "2026-01-01",
        },
        rule_id=4,
    )
    assert parsed.id == 4
    assert parsed.name == "nights"
    assert parsed.windows[0].days == frozenset({4, 5, 6, 0})
    assert parsed.windows[0].end is None
    assert parsed.windows[1] == Window(frozenset({2}), time(0), None)
    data = parsed.to_json()
    assert data["windows"][0] == {
        "days": ["mon", "fri", "sat", "sun"],
        "start": "08:00",
        "end": "24:00",
    }
    assert data["valid_from"] == "2026-01-01"
    assert data["valid_until"] is None
    assert parse_rule(data, 4) == parsed


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"groups": ["phd"], "valid_from": "2026-06-10", "valid_until": "2026-06-01"},
         ["valid_until", "before it starts"]),
        ({"groups": ["phd"], "valid_from": "June"}, ["valid_from", "YYYY-MM-DD"]),
        ({"groups": ["phd"], "windows": [{"days": ["mon"], "start": "25:00"}]}, ["start", "HH:MM"]),
        ({"groups": ["phd"], "windows": [{"days": ["mon"], "end": "16:75"}]}, ["end", "HH:MM"]),
        ({"groups": ["phd"], "windows": [{"days": ["mon"], "start": "24:00"}]}, ["24:00"]),
        ({"groups": ["phd"], "windows": [{"days": ["funday"]}]}, ["Unknown day", "funday"]),
        ({"groups": ["phd"], "windows": [{"days": [], "start": "08:00"}]}, ["at least one day"]),
        ({"groups": ["phd"], "windows": [{"days": "mon", "start": "08:00", "end": "08:00"}]},
         ["both 08:00"]),
        ({"groups": ["phd"], "windows": "mon 8-16"}, ["'windows'"]),
        ({"groups": ["phd"], "windows": ["mon"]}, ["window"]),
        ({"windows": []}, ["subject"]),
        ({"groups": "phd"}, ["'groups'"]),
        ({"users": [""]}, ["'users'"]),
        ({"users": ["*"], "name": "x" * 121}, ["'name'"]),
    ],
)  # fmt: skip
def test_parse_rule_refuses_with_a_reason(spec: dict[str, object], words: list[str]) -> None:
    with pytest.raises(Invalid) as caught:
        parse_rule(spec)
    for word in words:
        assert word in caught.value.message, caught.value.message
    assert caught.value.message.endswith(".")


def test_parse_rule_and_window_need_objects() -> None:
    with pytest.raises(Invalid, match="JSON object"):
        parse_rule(["groups"])
    with pytest.raises(Invalid, match="object"):
        parse_window("mon 08:00-16:00")
