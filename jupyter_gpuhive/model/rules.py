"""Access rules as values: who may use which GPUs when (see `bookings.access` for coverage).

A rule allows its subjects (users, groups) to use its resources (hosts, GPUs, or all)
during weekly windows given as wall-clock times in the site time zone, between optional
validity dates. `parse_rule` validates a rule given as JSON (from a request or the store).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any

from ..errors import Invalid
from .core import UTC, Gpu, Identity

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EVERYONE = "*"
_TIME = re.compile(r"^([01]?\d|2[0-4]):([0-5]\d)$")

Span = tuple[datetime, datetime]


@dataclass(frozen=True)
class Window:
    """A weekly window: on `days` (0 = Monday) from `start` to `end` local time.

    `end` of None means midnight at the end of the day (written '24:00'); an end at or
    before the start means the window runs overnight into the next day.
    """

    days: frozenset[int]
    start: time
    end: time | None

    def to_json(self) -> dict[str, Any]:
        return {
            "days": [DAY_NAMES[d] for d in sorted(self.days)],
            "start": self.start.strftime("%H:%M"),
            "end": "24:00" if self.end is None else self.end.strftime("%H:%M"),
        }

    def spans_on(self, day: date, zone: tzinfo) -> Span | None:
        """The concrete UTC span this window opens on local date `day`, if any."""
        if day.weekday() not in self.days:
            return None
        start = datetime.combine(day, self.start, tzinfo=zone)
        if self.end is None:
            end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone)
        elif self.end <= self.start:
            end = datetime.combine(day + timedelta(days=1), self.end, tzinfo=zone)
        else:
            end = datetime.combine(day, self.end, tzinfo=zone)
        return start.astimezone(UTC), end.astimezone(UTC)


@dataclass(frozen=True)
class Rule:
    """An allow-rule: subjects × resources × weekly windows × validity dates."""

    id: int | None
    name: str
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    hosts: frozenset[str] = frozenset()
    gpus: frozenset[str] = frozenset()
    windows: tuple[Window, ...] = ()
    valid_from: date | None = None
    valid_until: date | None = None

    def applies_to(self, who: Identity) -> bool:
        """Whether the rule names this user, one of their groups, or everyone."""
        return EVERYONE in self.users or who.name in self.users or bool(self.groups & who.groups)

    def covers_gpu(self, gpu: Gpu) -> bool:
        """Whether the rule's resources include this GPU (a rule on a GPU covers its slices)."""
        if not self.hosts and not self.gpus:
            return True
        named = self.gpus
        return gpu.host in self.hosts or bool({gpu.ref, gpu.uuid, gpu.parent_ref} & named)

    def spans(self, start: datetime, end: datetime, zone: tzinfo) -> list[Span]:
        """The UTC spans within [start, end) that this rule allows (unmerged)."""
        low, high = start, end
        if self.valid_from is not None:
            low = max(low, datetime.combine(self.valid_from, time(0), tzinfo=zone))
        if self.valid_until is not None:
            until = self.valid_until + timedelta(days=1)
            high = min(high, datetime.combine(until, time(0), tzinfo=zone))
        if low >= high:
            return []
        if not self.windows:
            return [(low, high)]
        out: list[Span] = []
        day = low.astimezone(zone).date() - timedelta(days=1)
        last = high.astimezone(zone).date()
        while day <= last:
            for window in self.windows:
                span = window.spans_on(day, zone)
                if span is not None and span[0] < high and span[1] > low:
                    out.append((max(span[0], low), min(span[1], high)))
            day += timedelta(days=1)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "users": sorted(self.users),
            "groups": sorted(self.groups),
            "hosts": sorted(self.hosts),
            "gpus": sorted(self.gpus),
            "windows": [w.to_json() for w in self.windows],
            "valid_from": self.valid_from.isoformat() if self.valid_from else None,
            "valid_until": self.valid_until.isoformat() if self.valid_until else None,
        }


# --- parsing rules from JSON ---------------------------------------------------------


def _parse_days(value: Any) -> frozenset[int]:
    items = value if isinstance(value, list) else [value]
    days: set[int] = set()
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 6:
            days.add(item)
            continue
        text = str(item).strip().lower()
        if "-" in text:
            first, _, last = text.partition("-")
            a, b = _day_index(first), _day_index(last)
            days.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
        else:
            days.add(_day_index(text))
    if not days:
        raise Invalid("A window needs at least one day, e.g. ['mon-fri'].")
    return frozenset(days)


def _day_index(text: str) -> int:
    key = text.strip().lower()[:3]
    if key not in DAY_NAMES:
        raise Invalid(f"Unknown day {text!r}: use mon, tue, wed, thu, fri, sat, sun or a range.")
    return DAY_NAMES.index(key)


def _parse_time(value: Any, name: str, allow_24: bool) -> time | None:
    match = _TIME.match(value) if isinstance(value, str) else None
    if not match:
        raise Invalid(f"Window {name} must be a time 'HH:MM', got {value!r}.")
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour == 24:
        if minute or not allow_24:
            raise Invalid(f"Window {name} {value!r} is not a valid time of day.")
        return None
    return time(hour, minute)


def parse_window(data: Any) -> Window:
    """Parse {'days': [...], 'start': 'HH:MM', 'end': 'HH:MM'} into a Window."""
    if not isinstance(data, dict):
        raise Invalid("Each window must be an object with 'days', 'start' and 'end'.")
    start = _parse_time(data.get("start", "00:00"), "start", allow_24=False)
    end = _parse_time(data.get("end", "24:00"), "end", allow_24=True)
    assert start is not None
    if end is not None and end == start:
        raise Invalid(
            f"Window start and end are both {start:%H:%M}; for a whole day use 00:00–24:00."
        )
    return Window(_parse_days(data.get("days", "mon-sun")), start, end)


def _parse_names(data: dict[str, Any], key: str) -> frozenset[str]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise Invalid(f"'{key}' must be a list of non-empty names.")
    return frozenset(v.strip() for v in value)


def _parse_date(value: Any, name: str) -> date | None:
    if value in (None, ""):
        return None
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise Invalid(f"'{name}' must be a date 'YYYY-MM-DD', got {value!r}.") from None


def parse_rule(data: Any, rule_id: int | None = None) -> Rule:
    """Validate a rule given as JSON; raise Invalid with a readable message."""
    if not isinstance(data, dict):
        raise Invalid("A rule must be a JSON object.")
    name = data.get("name", "")
    if not isinstance(name, str) or len(name) > 120:
        raise Invalid("'name' must be a string of at most 120 characters.")
    users, groups = _parse_names(data, "users"), _parse_names(data, "groups")
    if not users and not groups:
        raise Invalid("A rule needs at least one subject: 'users' (or '*') or 'groups'.")
    windows = data.get("windows") or []
    if not isinstance(windows, list):
        raise Invalid("'windows' must be a list of {days, start, end} objects.")
    valid_from = _parse_date(data.get("valid_from"), "valid_from")
    valid_until = _parse_date(data.get("valid_until"), "valid_until")
    if valid_from and valid_until and valid_until < valid_from:
        raise Invalid(
            f"The rule ends ({valid_until}) before it starts ({valid_from}); "
            "'valid_until' must be on or after 'valid_from'."
        )
    return Rule(
        id=rule_id,
        name=name.strip(),
        users=users,
        groups=groups,
        hosts=_parse_names(data, "hosts"),
        gpus=_parse_names(data, "gpus"),
        windows=tuple(parse_window(w) for w in windows),
        valid_from=valid_from,
        valid_until=valid_until,
    )
