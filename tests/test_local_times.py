"""Times typed in the kernel's local zone (%gpureserve --at / --until) across DST changes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from IPython.core.error import UsageError

from jupyter_gpuhive.notebook.magics import parse_when

UTC = timezone.utc


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture(autouse=True)
def warsaw(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The kernel runs in Europe/Warsaw (TZ, as a container or a login sets it)."""
    monkeypatch.setenv("TZ", "Europe/Warsaw")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("now", "text", "meant"),
    [
        # Saturday evenings before the changes: tomorrow 09:00 has tomorrow's offset.
        (utc(2027, 3, 27, 21, 0), "09:00", utc(2027, 3, 28, 7, 0)),  # Sun 09:00 CEST
        (utc(2027, 10, 30, 20, 0), "09:00", utc(2027, 10, 31, 8, 0)),  # Sun 09:00 CET
        # On the change's day, before and after it.
        (utc(2027, 3, 28, 0, 30), "09:00", utc(2027, 3, 28, 7, 0)),
        (utc(2027, 3, 28, 2, 0), "01:00", utc(2027, 3, 28, 23, 0)),  # past: Monday 01:00 CEST
        # An ordinary winter day: later today, or tomorrow once past.
        (utc(2027, 1, 15, 12, 0), "14:30", utc(2027, 1, 15, 13, 30)),
        (utc(2027, 1, 15, 12, 0), "08:00", utc(2027, 1, 16, 7, 0)),
        (utc(2027, 12, 31, 22, 59), "00:30", utc(2027, 12, 31, 23, 30)),  # into the new year
        # A local ISO time in the other season takes that season's offset; offsets are kept.
        (utc(2026, 11, 24, 12, 0), "2027-07-01T10:00", utc(2027, 7, 1, 8, 0)),
        (utc(2027, 7, 1, 12, 0), "2027-12-01T10:00", utc(2027, 12, 1, 9, 0)),
        (utc(2026, 11, 24, 12, 0), "2027-07-01T10:00+00:00", utc(2027, 7, 1, 10, 0)),
    ],
)
def test_local_times_take_the_offset_of_their_own_day(
    now: datetime, text: str, meant: datetime
) -> None:
    assert parse_when(text, now) == meant


def test_unreadable_times_are_refused_in_words() -> None:
    for text in ("25:00", "9:75", "noon", "2027-02-30T10:00"):
        with pytest.raises(UsageError, match="Cannot read the time"):
            parse_when(text, utc(2027, 1, 15, 12, 0))
