"""Time zones and day arithmetic for the magics and widgets (calendar days are local days)."""

from __future__ import annotations

import os
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC = timezone.utc


def local_zone() -> tzinfo:
    """The kernel's time zone: $TZ, /etc/localtime's zone name, else the current offset."""
    names = [os.environ.get("TZ", "").lstrip(":")]
    try:
        target = Path("/etc/localtime").resolve()
        if "zoneinfo" in target.parts:
            names.append("/".join(target.parts[target.parts.index("zoneinfo") + 1 :]))
    except OSError:
        pass
    for name in names:
        if name:
            try:
                return ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return datetime.now().astimezone().tzinfo or UTC


def as_zone(zone: tzinfo | str | None) -> tzinfo:
    """A tzinfo from a name, a tzinfo or None (the kernel's zone)."""
    if zone is None:
        return local_zone()
    return ZoneInfo(zone) if isinstance(zone, str) else zone


def midnight(day: date, zone: tzinfo) -> datetime:
    """The instant a local day starts."""
    return datetime.combine(day, time(), tzinfo=zone)


def parse(text: str) -> datetime:
    """An ISO 8601 instant from the API (always with an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(instant: datetime) -> str:
    """An instant for the API: ISO 8601 in UTC with its offset."""
    if instant.tzinfo is None:
        raise ValueError("times sent to gpuhive must be timezone-aware")
    return instant.astimezone(UTC).isoformat()


def day_segments(
    start: datetime, end: datetime, days: list[date], zone: tzinfo
) -> list[tuple[int, float, float]]:
    """[start, end) cut at local midnights: (day index, hour from, hour to) per shown day."""
    out = []
    for i, day in enumerate(days):
        day_start = midnight(day, zone)
        day_end = midnight(day + timedelta(days=1), zone)
        a, b = max(start, day_start), min(end, day_end)
        if a < b:
            out.append((i, hours_into(a, day_start), hours_into(b, day_start)))
    return out


def hours_into(instant: datetime, day_start: datetime) -> float:
    """Hours on the local clock from a day's start to an instant (the calendar's y coordinate).

    On the local clock, as the brush reads it: on a DST day 04:30 is at 4.5, not at 3.5 real
    hours after midnight.
    """
    local = instant.astimezone(day_start.tzinfo).replace(tzinfo=None)
    return (local - day_start.replace(tzinfo=None)).total_seconds() / 3600


def local_text(instant: datetime, zone: tzinfo) -> str:
    """A short local rendering such as 'Mon 04 May 09:00'."""
    return instant.astimezone(zone).strftime("%a %d %b %H:%M")
