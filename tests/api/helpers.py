"""Helpers shared by the REST API tests."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tests.conftest import UTC, Call, Reply, iso

WARSAW = ZoneInfo("Europe/Warsaw")  # the site time zone of the test configuration
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def now() -> datetime:
    return datetime.now(UTC)


def next_local(day: str, hour: int, minute: int = 0) -> datetime:
    """The next `day` (e.g. 'tue') at least one day ahead, at a Warsaw wall-clock time."""
    today = datetime.now(WARSAW).date()
    ahead = (DAYS.index(day) - today.weekday()) % 7 or 7
    return at_local(today + timedelta(days=ahead), hour, minute)


def at_local(day: date, hour: int, minute: int = 0) -> datetime:
    if hour == 24:
        return datetime.combine(day + timedelta(days=1), time(0), tzinfo=WARSAW)
    return datetime.combine(day, time(hour, minute), tzinfo=WARSAW)


def booking(gpus: list[str], start: datetime, end: datetime, title: str = "run") -> dict:
    return {"title": title, "gpus": gpus, "start": iso(start), "end": iso(end)}


async def snapshot(call: Call) -> list[dict[str, Any]]:
    """Every reservation the store holds near now (cancelled too), to compare before/after."""
    reply = await call(
        "GET",
        "reservations",
        params={
            "start": iso(now() - timedelta(days=2)),
            "end": iso(now() + timedelta(days=40)),
            "include_cancelled": "true",
        },
    )
    assert reply.status == 200, reply
    return reply.body["reservations"]


async def ids(call: Call, **params: str) -> list[int]:
    """Ids of the reservations GET reservations lists for these query parameters."""
    reply = await call("GET", "reservations", params=params)
    assert reply.status == 200, reply
    return [r["id"] for r in reply.body["reservations"]]


def refused(reply: Reply, status: int, *words: str) -> str:
    """Assert an error reply: the status, and a readable sentence naming the problem."""
    assert reply.status == status, reply
    assert isinstance(reply.body, dict), reply
    assert set(reply.body) >= {"message"}, reply
    message = reply.message
    assert len(message) >= 15, message
    assert message[0].isalnum() or message[0] in "'\"", message
    assert message.rstrip().endswith("."), message
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    return message


def overlaps(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two reservation JSON objects share a GPU at the same time."""
    if not set(a["gpus"]) & set(b["gpus"]):
        return False
    a0, a1 = datetime.fromisoformat(a["start"]), datetime.fromisoformat(a["end"])
    b0, b1 = datetime.fromisoformat(b["start"]), datetime.fromisoformat(b["end"])
    return a0 < b1 and b0 < a1
