"""Fair-share limits as values: what one user, group or the site may book, and score tiers.

Five limits, each unset (None: no limit) or a value:

- ``gpus``: GPUs held at once;
- ``gpu_hours_week``: GPU-hours booked in any rolling 7 days;
- ``upcoming``: reservations not yet ended (running or to come);
- ``longest``: the longest reservation;
- ``horizon``: how far ahead a reservation may start.

A `LimitTable` holds the site default, per-group and per-user entries, and the tiers. For
each limit the user's own value wins, then the most generous value among their groups,
then the site default. Tiers scale a limit by the user's usage score ("below 30 %
efficiency over 30 days, the 7-day GPU-hour limit halves").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from ..errors import BadRequest, Invalid
from .core import Identity, describe_duration, parse_duration

COUNTS = ("gpus", "upcoming")
DURATIONS = ("longest", "horizon")
NAMES = ("gpus", "gpu_hours_week", "upcoming", "longest", "horizon")
SCALABLE = ("gpus", "gpu_hours_week", "upcoming")  # the limits a tier may scale
WHAT = {
    "gpus": "GPUs held at once",
    "gpu_hours_week": "GPU-hours in any 7 days",
    "upcoming": "upcoming reservations",
    "longest": "longest reservation",
    "horizon": "booking horizon",
}
MAX_COUNT = 1_000_000


@dataclass(frozen=True)
class Limits:
    """One entry of limits; None leaves a limit to the next level (group, then default)."""

    gpus: int | None = None
    gpu_hours_week: float | None = None
    upcoming: int | None = None
    longest: timedelta | None = None
    horizon: timedelta | None = None

    def get(self, name: str) -> Any:
        return getattr(self, name)

    @property
    def empty(self) -> bool:
        return all(self.get(n) is None for n in NAMES)

    def to_json(self) -> dict[str, Any]:
        """Counts and GPU-hours as numbers, durations in seconds."""
        out: dict[str, Any] = {}
        for name in NAMES:
            value = self.get(name)
            out[name] = value.total_seconds() if isinstance(value, timedelta) else value
        return out

    @classmethod
    def parse(cls, body: Any) -> Limits:
        """Limits from JSON; absent or null leaves a limit unset; bad values raise 400/422."""
        if not isinstance(body, Mapping):
            raise BadRequest('Limits must be a JSON object such as {"gpus": 4}.')
        unknown = sorted(set(body) - set(NAMES))
        if unknown:
            raise Invalid(
                f"Unknown limit(s) {', '.join(unknown)}; the limits are {', '.join(NAMES)}."
            )
        values: dict[str, Any] = {}
        for name in NAMES:
            value = body.get(name)
            if value is None:
                continue
            if name in DURATIONS:
                values[name] = parse_duration(value, name)
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise Invalid(f"'{name}' must be a number (or null for no limit at this level).")
            if not math.isfinite(value) or not 0 <= value <= MAX_COUNT:
                raise Invalid(f"'{name}' must be from 0 to {MAX_COUNT}, not {value}.")
            if name in COUNTS:
                if value != int(value):
                    raise Invalid(f"'{name}' must be a whole number, not {value}.")
                value = int(value)
            values[name] = float(value) if name == "gpu_hours_week" else value
        return cls(**values)

    def describe(self, name: str) -> str:
        """One limit's value in words ('8 GPUs', '40 GPU-hours', '2d')."""
        value = self.get(name)
        if value is None:
            return "no limit"
        if name in DURATIONS:
            return describe_duration(value)
        unit = {"gpus": "GPU", "gpu_hours_week": "GPU-hour", "upcoming": "reservation"}[name]
        return f"{value:g} {unit}{'' if value == 1 else 's'}"


@dataclass(frozen=True)
class Tier:
    """Below `efficiency_below` percent efficiency, `limit` is multiplied by `factor`."""

    efficiency_below: float
    limit: str = "gpu_hours_week"
    factor: float = 0.5

    def to_json(self) -> dict[str, Any]:
        return {"efficiency_below": self.efficiency_below, "limit": self.limit,
                "factor": self.factor}  # fmt: skip

    @classmethod
    def parse(cls, body: Any) -> Tier:
        if not isinstance(body, Mapping):
            raise BadRequest(
                'A tier must be an object such as {"efficiency_below": 30, '
                '"limit": "gpu_hours_week", "factor": 0.5}.'
            )
        unknown = sorted(set(body) - {"efficiency_below", "limit", "factor"})
        if unknown:
            raise Invalid(f"Unknown tier field(s) {', '.join(unknown)}.")
        limit = body.get("limit", "gpu_hours_week")
        numbers: dict[str, float] = {}
        for name, value in (("efficiency_below", body.get("efficiency_below")),
                            ("factor", body.get("factor", 0.5))):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise Invalid(f"The tier's '{name}' must be a number.")
            numbers[name] = float(value)
        below, factor = numbers["efficiency_below"], numbers["factor"]
        if not 0 < below <= 100:
            raise Invalid("The tier's 'efficiency_below' must be a percentage, above 0 to 100.")
        if not 0 <= factor <= 1:
            raise Invalid("The tier's 'factor' must be from 0 to 1 (it lowers a limit).")
        if limit not in SCALABLE:
            raise Invalid(f"A tier can scale {', '.join(SCALABLE)}, not {limit!r}.")
        return cls(below, limit, factor)


@dataclass(frozen=True)
class Effective:
    """The limits that apply to one user, where each comes from, and how tiers changed them."""

    limits: Limits
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)

    def source(self, name: str) -> str:
        """Where a limit comes from, for messages ('your own limit', "group phd's limit")."""
        text = self.sources.get(name, "the site default")
        note = self.notes.get(name)
        return f"{text}; {note}" if note else text

    def to_json(self) -> dict[str, Any]:
        return {
            "limits": self.limits.to_json(),
            "sources": dict(self.sources),
            "notes": dict(self.notes),
        }


@dataclass(frozen=True)
class LimitTable:
    """Every configured limit: the site default, groups, users; and the score tiers."""

    default: Limits = Limits()
    groups: Mapping[str, Limits] = field(default_factory=dict)
    users: Mapping[str, Limits] = field(default_factory=dict)
    tiers: tuple[Tier, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether no limit is set anywhere (bookings then skip the check)."""
        return (
            self.default.empty
            and all(v.empty for v in self.groups.values())
            and all(v.empty for v in self.users.values())
        )

    def resolve(self, who: Identity) -> Effective:
        """The limits for `who`: user over (most generous) group over site default."""
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        own = self.users.get(who.name, Limits())
        for name in NAMES:
            if own.get(name) is not None:
                values[name], sources[name] = own.get(name), f"{who.name}'s own limit"
                continue
            best: tuple[Any, str] | None = None
            for group in sorted(who.groups):
                value = self.groups.get(group, Limits()).get(name)
                if value is not None and (best is None or value > best[0]):
                    best = (value, group)
            if best is not None:
                values[name], sources[name] = best[0], f"the limit of group {best[1]}"
            elif self.default.get(name) is not None:
                values[name], sources[name] = self.default.get(name), "the site default"
        return Effective(Limits(**values), sources)

    def to_json(self) -> dict[str, Any]:
        return {
            "default": self.default.to_json(),
            "groups": {k: v.to_json() for k, v in sorted(self.groups.items())},
            "users": {k: v.to_json() for k, v in sorted(self.users.items())},
            "tiers": [t.to_json() for t in self.tiers],
        }

    def merged(self, other: LimitTable, tiers_set: bool) -> LimitTable:
        """This table (from configuration) with `other`'s entries (stored) replacing its own."""
        default = other.default if not other.default.empty else self.default
        return LimitTable(
            default,
            {**self.groups, **other.groups},
            {**self.users, **other.users},
            other.tiers if tiers_set else self.tiers,
        )


def apply_tiers(
    effective: Effective, tiers: tuple[Tier, ...], efficiency: float | None, window: str
) -> Effective:
    """Scale limits by the tiers the user's efficiency (percent) falls under."""
    if efficiency is None or not tiers:
        return effective
    limits, notes = effective.limits, dict(effective.notes)
    for tier in tiers:
        value = limits.get(tier.limit)
        if value is None or efficiency >= tier.efficiency_below:
            continue
        scaled = value * tier.factor
        scaled = math.floor(scaled) if tier.limit in COUNTS else round(scaled, 4)
        limits = replace(limits, **{tier.limit: scaled})
        notes[tier.limit] = (
            f"scaled by {tier.factor:g} from {value:g} because the efficiency over the last "
            f"{window} is {efficiency:.0f} %, below {tier.efficiency_below:g} %"
        )
    return Effective(limits, effective.sources, notes)


def parse_table(body: Any) -> LimitTable:
    """A LimitTable from configuration: {'default': {...}, 'groups': {...}, 'users': {...},
    'tiers': [...]}."""
    if not isinstance(body, Mapping):
        raise Invalid("The limits must be a mapping with 'default', 'groups', 'users', 'tiers'.")
    unknown = sorted(set(body) - {"default", "groups", "users", "tiers"})
    if unknown:
        raise Invalid(f"Unknown limits section(s) {', '.join(unknown)}.")
    groups, users = body.get("groups") or {}, body.get("users") or {}
    if not isinstance(groups, Mapping) or not isinstance(users, Mapping):
        raise Invalid("'groups' and 'users' must map names to limits.")
    tiers = body.get("tiers") or []
    if not isinstance(tiers, list):
        raise Invalid("'tiers' must be a list.")
    return LimitTable(
        Limits.parse(body.get("default") or {}),
        {str(k): Limits.parse(v) for k, v in groups.items()},
        {str(k): Limits.parse(v) for k, v in users.items()},
        tuple(Tier.parse(t) for t in tiers),
    )


__all__ = ["NAMES", "WHAT", "Effective", "LimitTable", "Limits", "Tier", "apply_tiers",
           "parse_table"]  # fmt: skip
