"""The body and answer of POST reservations/search: the earliest slots that fit a request."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import Field

from ....bookings.finder import MAX_ANSWERS, MAX_COUNT
from ....errors import Invalid
from ....model.finder import Want
from .bodies import Closed
from .fields import (
    MEMORY,
    SHARE,
    Check,
    Duration,
    Flag,
    MaybeInstant,
    integer,
    maybe,
    refuse,
    text,
    whole,
)
from .replies import Reply

INDEX_MAX = 1023
MEMORY_MAX = 10_000_000


def _indices(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise refuse("{field} must be a list of GPU indices such as [0, 1].", 400)
    out = []
    for item in value:
        index = integer(item)
        if index is None:
            raise refuse("Each entry of {field} must be a GPU index (a whole number).", 400)
        if not 0 <= index <= INDEX_MAX:
            raise refuse(f"Each entry of {{field}} must be from 0 to {INDEX_MAX}.")
        out.append(index)
    if len(set(out)) != len(out):
        raise refuse("{field} names a GPU index twice.")
    return tuple(out)


INDICES = Check(
    _indices,
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": INDEX_MAX},
     "uniqueItems": True, "examples": [[0, 1]]},
)  # fmt: skip


def _seconds(instant: datetime | None) -> int:
    return int(instant.timestamp()) if instant is not None else 0


class SlotSearchBody(Closed):
    """A count of GPUs (or of MIG slices, or slices of a profile) for a duration, with
    constraints, between `not_before` (default now) and `deadline` (default: the booking
    horizon). Any other field is refused (400)."""

    count: Annotated[int | None, maybe(whole(1, MAX_COUNT))] = Field(
        None, description="How many units; with 'indices' it defaults to their number"
    )
    duration: Duration
    slices: Flag = Field(False, description="Count MIG slices instead of whole GPUs")
    profile: Annotated[str | None, maybe(text(32, required=True))] = Field(
        None, description="Only MIG slices of this profile, e.g. '1g.10gb' (implies slices)"
    )
    not_before: MaybeInstant = None
    deadline: MaybeInstant = Field(None, description="The slot must end by then")
    same_host: Flag = False
    nvlink: Flag = Field(False, description="Every pair NVLink-connected (implies same host)")
    same_numa: Flag = Field(False, description="All on one NUMA node (implies same host)")
    model: Annotated[str | None, maybe(text(128, required=True))] = Field(
        None, description="A part of the GPU model name, any case, e.g. 'A100'"
    )
    vendor: Annotated[str | None, maybe(text(128, required=True))] = Field(
        None, description="Only this vendor's GPUs: nvidia, amd (422 names the known ones)"
    )
    min_memory_mib: Annotated[int | None, maybe(whole(1, MEMORY_MAX))] = None
    indices: Annotated[tuple[int, ...] | None, maybe(INDICES)] = Field(
        None, description="Only these GPU indices, on one host (implies same host)"
    )
    host: Annotated[str | None, maybe(text(253, required=True))] = None
    limit: Annotated[int, whole(1, MAX_ANSWERS)] = Field(5, description="How many answers")
    share: Annotated[int | None, maybe(SHARE)] = None
    memory: Annotated[int | None, maybe(MEMORY)] = None

    def value(self) -> Want:
        """The request as the finder takes it (epoch seconds; 0: the default)."""
        indices = self.indices or ()
        count = self.count if self.count is not None else len(indices)
        if count == 0 and (self.share is not None or self.memory is not None):
            count = 1  # a share is of one GPU
        if count == 0:
            raise Invalid("'count' is required (or give 'indices').")
        return Want(
            count=count,
            duration=int(self.duration / timedelta(seconds=1)),
            not_before=_seconds(self.not_before),
            deadline=_seconds(self.deadline),
            slices=self.slices or self.profile is not None,
            profile=self.profile,
            same_host=self.same_host,
            nvlink=self.nvlink,
            same_numa=self.same_numa,
            model=self.model,
            vendor=self.vendor,
            min_memory_mib=self.min_memory_mib,
            indices=indices,
            host=self.host,
            limit=self.limit,
            share=self.share,
            memory_mib=self.memory,
        )


class SlotReply(Reply):
    start: datetime
    end: datetime
    gpus: list[str] = Field(description="What to book: POST reservations with these GPUs")
    hosts: list[str]
    fragmentation: dict[str, int] = Field(
        description="Lower is better: free slices left on the same GPUs, free units on the hosts"
    )
    share: float = Field(
        1.0, description="The share of its one GPU to book (1: whole GPUs); POST it with 'gpus'"
    )
    share_memory_mib: int | None = Field(
        None, description="The GPU memory that share holds, in MiB (null: whole GPUs)"
    )


class SlotSearchReply(Reply):
    slots: list[SlotReply] = Field(description="Earliest first, then least fragmentation")
    not_before: datetime
    deadline: datetime
