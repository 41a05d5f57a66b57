"""Query parameters: one model per set an operation takes, read by the handler and documented
from the same declaration. Every value arrives as text; an empty one means "not given".

Whole numbers are ASCII digits with an optional sign (no '²', '١', '1e3' or '0x10'), at most
20 characters, within the field's bounds; booleans are 1/0, true/false or yes/no.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ....bookings.service import MAX_LIST
from ....model import ID_MAX, parse_duration, parse_instant
from ....protection.reports import MAX_QUERY
from ..inputs import INT_MAX, INTEGER, shown
from .fields import Check, domain, refuse

_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def _whole(low: int, high: int) -> Check:
    def check(value: Any) -> int | None:
        if value in (None, ""):
            return None
        if not INTEGER.fullmatch(value) or len(value) > 20:
            raise refuse(f"{{field}} must be a whole number, got {shown(value)}.")
        number = int(value)
        if not low <= number <= high:
            raise refuse(f"{{field}} must be a whole number from {low} to {high}, got {value}.")
        return number

    return Check(check, {"type": "integer", "minimum": low, "maximum": high})


def _flag(value: Any) -> bool:
    text = (value or "").lower()
    if text not in ("", *_TRUE, *_FALSE):
        raise refuse(f"{{field}} must be true or false, got {shown(text)}.")
    return text in _TRUE


def _optional(check: Any) -> Any:
    return lambda value: None if value in (None, "") else check(value)


def _text(value: Any) -> str | None:
    return value or None


INSTANT = Check(
    _optional(domain(parse_instant)),
    {"type": "string", "anyOf": [{"format": "date-time"}, {"maxLength": 0}]},
)
DURATION = Check(_optional(domain(parse_duration)), {"type": "string", "examples": ["1h"]})
FLAG = Check(_flag, {"type": "boolean"})
TEXT = Check(_text, {"type": "string"})
Text = Annotated[str | None, TEXT]
When = Annotated[datetime | None, INSTANT]


ListLimit = Annotated[int | None, _whole(1, MAX_LIST)]
QueryLimit = Annotated[int | None, _whole(1, MAX_QUERY)]
DeliveryLimit = Annotated[int | None, _whole(1, 1000)]
Count = Annotated[int | None, _whole(0, INT_MAX)]


class Query(BaseModel):
    """Query parameters; those a model does not name are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    @classmethod
    def repeated(cls) -> frozenset[str]:
        """The parameters that may be given more than once (lists)."""
        return frozenset(
            name for name, field in cls.model_fields.items() if field.annotation == list[str]
        )


class Window(Query):
    start: When = Field(None, description="Window start (ISO 8601 with an offset)")
    end: When = Field(None, description="Window end (ISO 8601 with an offset)")


class GpuWindow(Window):
    host: Text = Field(None, description="Only GPUs of this host")
    gpu: Text = Field(
        None, description="Only this GPU ('host:index' or UUID, with its MIG slices) or slice"
    )


class MetricsQuery(Query):
    host: Text = Field(None, description="Only this host")
    gpu: Text = Field(None, description="Only this GPU")
    since: When = Field(None, description="Only points after this instant")


class UsageQuery(Query):
    start: When = Field(None, description="Window start (default: 7 days before the end)")
    end: When = Field(None, description="Window end (default: now)")


class ReservationsQuery(GpuWindow):
    user: Text = Field(None, description="Only this owner")
    include_cancelled: Annotated[bool, FLAG] = Field(False, description="Also cancelled ones")
    limit: ListLimit = Field(None, description=f"At most this many (1-{MAX_LIST})")


class OverviewQuery(GpuWindow):
    slot: Annotated[timedelta | None, DURATION] = Field(
        None, description="Slot size, e.g. '1h', '1d' or seconds (default 1h)"
    )


class JobsQuery(Query):
    user: Text = Field(None, description="Only this owner")
    status: Text = Field(None, description="Only this status")
    limit: QueryLimit = Field(
        None,
        description=f"The newest this many, besides every job running now (1-{MAX_QUERY})",
    )


class LogQuery(Query):
    task: Count = Field(None, description="Task index (default 0)")
    offset: Count = Field(None, description="Byte offset to read from")
    tail: Count = Field(None, description="Only the last N bytes")


class ViolationsQuery(UsageQuery):
    user: Text = Field(None, description="Offender or holder")
    host: Text = Field(None, description="Only this host")
    reservation: Annotated[int | None, _whole(0, ID_MAX)] = Field(
        None, description="Only during this reservation"
    )
    kind: list[str] = Field(
        default_factory=list, description="foreign, unreserved, ghost or idle (repeatable)"
    )
    limit: QueryLimit = Field(None, description=f"At most this many (1-{MAX_QUERY})")


class DeliveriesQuery(Query):
    limit: DeliveryLimit = Field(None, description="At most this many (1-1000, default 100)")
