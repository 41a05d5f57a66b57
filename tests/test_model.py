"""Value types and the parsing of instants and durations (pure, no database)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpuhive.errors import BadRequest, Conflict, Forbidden, HiveError, Invalid, NotFound
from jupyter_gpuhive.model import (
    UTC,
    Gpu,
    Identity,
    Reservation,
    describe_duration,
    isoformat,
    parse_duration,
    parse_instant,
)


def test_parse_instant_accepts_offsets_and_returns_utc() -> None:
    assert parse_instant("2026-05-04T09:00:00+02:00", "start") == datetime(
        2026, 5, 4, 7, tzinfo=UTC
    )
    assert parse_instant("2026-05-04T07:00:00Z", "start") == datetime(2026, 5, 4, 7, tzinfo=UTC)
    assert parse_instant(" 2026-05-04T07:00:00z ", "start") == datetime(2026, 5, 4, 7, tzinfo=UTC)
    parsed = parse_instant("2026-05-04T02:30:00-05:00", "end")
    assert parsed.utcoffset() == timedelta(0)
    assert parsed == datetime(2026, 5, 4, 7, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2026-05-04T09:00:00", ["'start'", "no time zone offset"]),
        ("next tuesday", ["'start'", "not a date-time", "next tuesday"]),
        ("2026-13-45T09:00:00Z", ["'start'", "not a date-time"]),
        ("", ["'start'", "ISO 8601"]),
        (None, ["'start'", "ISO 8601"]),
        (1714809600, ["'start'", "ISO 8601"]),
        ("9999-12-31T23:59:59-01:00", ["'start'", "out of range"]),
        ("0001-01-01T00:30:00+01:00", ["'start'", "out of range"]),
        ("1969-12-31T23:59:59Z", ["'start'", "out of range", "1970"]),
    ],
)
def test_parse_instant_refuses_naive_and_garbage(value: object, words: list[str]) -> None:
    with pytest.raises(Invalid) as caught:
        parse_instant(value, "start")
    assert caught.value.status == 422
    for word in words:
        assert word in caught.value.message
    assert caught.value.message.endswith(".")


def test_isoformat_is_utc_with_offset() -> None:
    warsaw = timezone(timedelta(hours=2))
    assert isoformat(datetime(2026, 5, 4, 9, tzinfo=warsaw)) == "2026-05-04T07:00:00+00:00"
    assert isoformat(None) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(90, 90), (1.5, 1.5), ("90s", 90), ("15m", 900), ("15 min", 900), ("2h", 7200),
     ("1d", 86400), ("1w", 604800), ("2H", 7200), ("0.5h", 1800), ("45", 45)],
)  # fmt: skip
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value, "duration") == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "value",
    ["", "2 hours", "h", "-1h", "1y", None, True, [1], 0, "0m", float("nan"), float("inf"),
     1e300, "99999999999999999999d", "36526d"],
)  # fmt: skip
def test_parse_duration_refuses(value: object) -> None:
    with pytest.raises(Invalid) as caught:
        parse_duration(value, "duration")
    assert "'duration'" in caught.value.message
    assert caught.value.status == 422


def test_describe_duration() -> None:
    assert describe_duration(timedelta(minutes=15)) == "15min"
    assert describe_duration(timedelta(hours=2)) == "2h"
    assert describe_duration(timedelta(days=1, hours=4)) == "1d 4h"
    assert describe_duration(timedelta(days=3, minutes=5)) == "3d 5min"
    assert describe_duration(timedelta(seconds=20)) == "0min"


def test_error_statuses() -> None:
    assert [e.status for e in (BadRequest, Forbidden, NotFound, Conflict, Invalid)] == [
        400,
        403,
        404,
        409,
        422,
    ]
    error = Conflict("Taken.", conflicts=[1])
    assert isinstance(error, HiveError)
    assert error.message == "Taken."
    assert error.details == {"conflicts": [1]}


def test_identity_and_gpu_json() -> None:
    who = Identity("alice", frozenset({"phd", "a-team"}), is_admin=False)
    assert who.to_json() == {"name": "alice", "groups": ["a-team", "phd"], "admin": False}
    gpu = Gpu(7, "gpu2", 3, "GPU-x", "A100", 40960)
    assert gpu.ref == "gpu2:3"
    assert gpu.to_json() == {
        "id": "gpu2:3",
        "host": "gpu2",
        "index": 3,
        "uuid": "GPU-x",
        "model": "A100",
        "memory_mib": 40960,
        "kind": "gpu",
        "shareable": False,
    }
    part = Gpu(9, "gpu2", 3, "MIG-y", "A100", 9728, 7, "1g.10gb", 13, 0)
    assert part.ref == "gpu2:3/mig13" and part.is_slice and part.device_id == 7
    assert part.to_json()["parent"] == "gpu2:3" and part.to_json()["kind"] == "slice"
    assert Gpu(10, "gpu2", 3, "MIG-z", None, None, 7, "1g.10gb", 13, 1).ref == "gpu2:3/mig13.1"


def test_reservation_status_and_json() -> None:
    start = datetime(2026, 5, 4, 7, tzinfo=UTC)
    end = start + timedelta(hours=2)
    gpus = (Gpu(1, "gpu1", 0, "GPU-a"), Gpu(2, "gpu1", 1, "GPU-b"))
    res = Reservation(3, "alice", "train", "", start, end, gpus, start - timedelta(days=1))
    assert res.status(start - timedelta(seconds=1)) == "upcoming"
    assert res.status(start) == "active"
    assert res.status(end - timedelta(microseconds=1)) == "active"
    assert res.status(end) == "ended"
    cancelled = Reservation(3, "alice", "t", "", start, end, gpus, start, cancelled_at=start)
    assert cancelled.cancelled
    assert cancelled.status(start - timedelta(hours=1)) == "cancelled"
    data = res.to_json(start)
    assert data["gpus"] == ["gpu1:0", "gpu1:1"]
    assert data["gpu_uuids"] == ["GPU-a", "GPU-b"]
    assert data["start"] == "2026-05-04T07:00:00+00:00"
    assert data["end"] == "2026-05-04T09:00:00+00:00"
    assert data["status"] == "active"
    assert data["cancelled_at"] is None
    assert data["flagged"] is False
