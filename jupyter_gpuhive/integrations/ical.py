"""RFC 5545 text: escaping, 75-octet line folding, CRLF, UTC times; one VEVENT per booking."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime

from ..model import UTC, Reservation
from ..store.feeds import CalendarEntry

PRODID = "-//jupyter-gpuhive//gpuhive feed//EN"
CACHE_MAX = 100_000  # rendered events kept (a few hundred bytes each)
_CONTROLS = {c: None for c in (*range(0x09), *range(0x0A, 0x20), 0x7F)}
_UTC_ZONE = (
    b"BEGIN:VTIMEZONE\r\nTZID:UTC\r\nBEGIN:STANDARD\r\nDTSTART:19700101T000000\r\n"
    b"TZOFFSETFROM:+0000\r\nTZOFFSETTO:+0000\r\nTZNAME:UTC\r\nEND:STANDARD\r\n"
    b"END:VTIMEZONE\r\n"
)


def escape(text: str) -> str:
    """A TEXT value: backslash, semicolon, comma and newlines escaped (RFC 5545 3.3.11)."""
    text = text.replace("\\", "\\\\").replace(";", "\\;").replace(",", "\\,")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return text.translate(_CONTROLS)  # other control characters are not allowed in TEXT


def fold(line: str) -> bytes:
    """One content line, folded at 75 octets without splitting a UTF-8 character, with CRLF."""
    data = line.encode()
    if len(data) <= 75:
        return data + b"\r\n"
    parts: list[bytes] = []
    start, limit = 0, 75
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # continuation byte
            end -= 1
        parts.append(data[start:end])
        start, limit = end, 74  # later lines start with one space
    return b"\r\n ".join(parts) + b"\r\n"


def utc(instant: datetime) -> str:
    """A DATE-TIME in UTC form (…Z)."""
    t = instant.astimezone(UTC)
    return f"{t.year:04d}{t.month:02d}{t.day:02d}T{t.hour:02d}{t.minute:02d}{t.second:02d}Z"


def fingerprint(res: Reservation, with_description: bool = True) -> str:
    """What a calendar shows of a reservation; SEQUENCE grows when this changes."""
    parts = [res.title, res.description if with_description else "", res.owner]
    parts += [utc(res.start), utc(res.end), ",".join(g.ref for g in res.gpus)]
    parts.append("cancelled" if res.cancelled else "")
    if res.tentative:  # only then: a confirmed booking's fingerprint is as before 0024
        parts.append("tentative")
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def status(res: Reservation) -> str:
    """RFC 5545's STATUS of a booking: CANCELLED, TENTATIVE (waiting for approval), CONFIRMED."""
    if res.cancelled:
        return "CANCELLED"
    return "TENTATIVE" if res.tentative else "CONFIRMED"


def event_lines(
    res: Reservation, entry: CalendarEntry, with_description: bool
) -> list[tuple[str, str]]:
    """The properties of one reservation's VEVENT, as (name, already-escaped value)."""
    hosts = sorted({g.host for g in res.gpus})
    gpus = ", ".join(g.ref for g in res.gpus)
    count = res.held_text()  # '2 GPUs', or a share: '0.25 of a GPU (20 GiB)'
    text = [f"Owner: {res.owner}", f"GPUs: {gpus}", f"Host: {', '.join(hosts)}"]
    text.append(f"Reservation: {res.id}")
    if with_description and res.description:
        text += ["", res.description]
    lines = [
        ("UID", entry.uid),
        ("DTSTAMP", utc(entry.changed_at)),
        ("CREATED", utc(res.created_at)),
        ("LAST-MODIFIED", utc(entry.changed_at)),
        ("SEQUENCE", str(entry.sequence)),
        ("DTSTART", utc(res.start)),
        ("DTEND", utc(res.end)),
        ("SUMMARY", escape(f"{res.title} ({count} on {', '.join(hosts)}, {res.owner})")),
        ("LOCATION", escape(", ".join(hosts))),
        ("DESCRIPTION", escape("\n".join(text))),
        ("CATEGORIES", "GPU reservation"),
        ("STATUS", status(res)),
        ("TRANSP", "OPAQUE"),
        ("X-GPUHIVE-OWNER", escape(res.owner)),
        ("X-GPUHIVE-GPUS", escape(gpus)),
    ]
    return lines


def calendar(
    name: str,
    items: Iterable[tuple[Reservation, CalendarEntry]],
    with_description: bool,
    refresh_minutes: int = 15,
    cache: dict[tuple[int, int, bool], bytes] | None = None,
) -> bytes:
    """A VCALENDAR with one VEVENT per reservation (all times UTC, so no VTIMEZONE)."""
    out = [
        fold("BEGIN:VCALENDAR"),
        fold("VERSION:2.0"),
        fold(f"PRODID:{PRODID}"),
        fold("CALSCALE:GREGORIAN"),
        fold(f"X-WR-CALNAME:{escape(name)}"),
        fold(f"NAME:{escape(name)}"),
        fold(f"REFRESH-INTERVAL;VALUE=DURATION:PT{refresh_minutes}M"),
        fold(f"X-PUBLISHED-TTL:PT{refresh_minutes}M"),
    ]
    events = 0
    for res, entry in items:
        # What a calendar shows changes only with SEQUENCE (the fingerprint bumps it).
        key = (res.id, entry.sequence, with_description)
        text = cache.get(key) if cache is not None else None
        if text is None:
            lines = event_lines(res, entry, with_description)
            text = b"".join([b"BEGIN:VEVENT\r\n", *(fold(f"{k}:{v}") for k, v in lines),
                             b"END:VEVENT\r\n"])  # fmt: skip
            if cache is not None:
                if len(cache) >= CACHE_MAX:
                    cache.clear()
                cache[key] = text
        out.append(text)
        events += 1
    if not events:  # RFC 5545 wants at least one component: UTC's (harmless) time zone
        out.append(_UTC_ZONE)
    out.append(b"END:VCALENDAR\r\n")
    return b"".join(out)
