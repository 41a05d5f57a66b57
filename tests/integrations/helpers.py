"""Shared helpers of the integration tests: feed URLs and fetching a feed without credentials."""

from __future__ import annotations

from datetime import datetime

import icalendar
import vobject

from tests.conftest import UTC, Call, Reply


def token_of(url: str) -> str:
    """The token of a feed URL '…/gpuhive/api/calendar/TOKEN.ics'."""
    assert "/gpuhive/api/calendar/" in url and url.endswith(".ics"), url
    return url.rsplit("/", 1)[1][: -len(".ics")]


async def new_feed(call: Call) -> str:
    """Make or rotate the caller's personal feed; its token."""
    made = await call("POST", "feeds/personal")
    assert made.status == 201, made
    return token_of(made.body["url"])


async def fetch(anonymous: Call, token: str) -> Reply:
    """GET a feed with no Jupyter credentials (the token in the URL is all it takes)."""
    return await anonymous("GET", f"calendar/{token}.ics")


def parse_strictly(text: str) -> dict[str, dict[str, object]]:
    """Both parsers read the feed; per UID the fields both agree on (they must agree)."""
    raw = text.encode()
    lines = raw.split(b"\r\n")
    assert lines[-1] == b"", "the feed must end with CRLF"
    assert b"\n" not in raw.replace(b"\r\n", b""), "bare LF in the feed"
    for line in lines:
        assert len(line) <= 75, f"line over 75 octets: {line!r}"
    first = icalendar.Calendar.from_ical(text)
    assert first.errors == [] if hasattr(first, "errors") else True
    for event in first.walk("VEVENT"):
        assert event.errors == [], event.errors
    second = vobject.readOne(text, validate=True)
    by_uid: dict[str, dict[str, object]] = {}
    for event in first.walk("VEVENT"):
        by_uid[str(event["UID"])] = {
            "summary": str(event["SUMMARY"]),
            "description": str(event["DESCRIPTION"]),
            "location": str(event["LOCATION"]),
            "start": event.decoded("DTSTART"),
            "end": event.decoded("DTEND"),
            "stamp": event.decoded("DTSTAMP"),
            "sequence": int(event["SEQUENCE"]),
            "status": str(event["STATUS"]),
        }
    seen = set()
    for event in getattr(second, "vevent_list", []):
        uid = event.uid.value
        mine = by_uid[uid]
        assert event.summary.value == mine["summary"]
        assert event.description.value == mine["description"]
        assert event.dtstart.value == mine["start"] and event.dtend.value == mine["end"]
        assert int(event.sequence.value) == mine["sequence"]
        assert event.status.value == mine["status"]
        seen.add(uid)
    assert seen == set(by_uid)
    for fields in by_uid.values():
        for key in ("start", "end", "stamp"):
            value = fields[key]
            assert isinstance(value, datetime) and value.utcoffset() is not None
            assert value.tzinfo is not None and value.utcoffset().total_seconds() == 0
            fields[key] = value.astimezone(UTC)
    return by_uid
