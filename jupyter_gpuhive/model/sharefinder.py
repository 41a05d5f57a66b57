"""The earliest share of a GPU: "20 GiB for 4 h" (issue #44).

Pure, like `model.finder`: it gets the candidate GPUs (whole, shareable, with enough memory),
each GPU's booked shares (start, end, millionths: a whole booking, a slice's or a running job's
claim counts whole), the spans the requester may use each GPU (None: all), and the fair-share
predicate. A share fits a GPU from `t` when the GPU's shares plus it stay at or under one whole
GPU at every instant of [t, t + duration), the rules allow it, and the limits take it.

Where a GPU's sum only falls when a booking ends, the earliest start on a GPU is `not_before`,
the end of one of its bookings, the start of an allowed span or an instant of `wake`. Answers
rank by start, then fullest GPU first (the most already booked at the start: shares pack onto
GPUs in use and leave whole GPUs free for whole-GPU work), then by the GPUs' order. One answer
per GPU: its earliest start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .core import Gpu
from .finder import Slot, Span
from .shares import WHOLE

Load = tuple[int, int, int]  # start, end (epoch seconds), millionths of the GPU
AcceptShare = Callable[[int, int, float], bool]  # (start, end, GPUs held) -> within limits?


def peak(loads: Sequence[Load], start: int, end: int) -> int:
    """The largest sum of `loads` at an instant of [start, end)."""
    instants = {start, *(a for a, b, _ in loads if start < a < end)}
    return max(
        (sum(s for a, b, s in loads if a <= t < b) for t in instants),
        default=0,
    )


def _fits(loads: Sequence[Load], share: int, start: int, end: int) -> bool:
    near = [load for load in loads if load[0] < end and load[1] > start]
    return peak(near, start, end) + share <= WHOLE


def _covered(allowed: Sequence[Span] | None, start: int, end: int) -> bool:
    if allowed is None:
        return True
    reach = start
    for a, b in sorted(allowed):
        if a <= reach < b:
            reach = b
        if reach >= end:
            return True
    return False


def earliest_shares(
    units: Sequence[Gpu],
    loads: Mapping[int, Sequence[Load]],
    share_of: Callable[[Gpu], int],
    duration: int,
    not_before: int,
    deadline: int,
    allowed: Mapping[int, Sequence[Span]] | None = None,
    accept: AcceptShare | None = None,
    wake: Sequence[int] = (),
    limit: int = 5,
) -> list[Slot]:
    """The earliest start of a share (`share_of(unit)` millionths: memory is a larger part of
    a smaller GPU) for `duration` s on each of `units`, best first (see the module's
    docstring); at most `limit`."""
    found: list[tuple[int, int, int, Slot]] = []
    for order, unit in enumerate(units):
        share = share_of(unit)
        mine = loads.get(unit.id, ())
        spans = None if allowed is None else allowed[unit.id]
        starts = {not_before, *wake, *(b for _, b, _ in mine), *(a for a, _ in spans or ())}
        for t in sorted(s for s in starts if not_before <= s <= deadline - duration):
            end = t + duration
            if not _fits(mine, share, t, end) or not _covered(spans, t, end):
                continue
            if accept is not None and not accept(t, end, share / WHOLE):
                continue
            booked = sum(s for a, b, s in mine if a <= t < b)
            slot = Slot(t, end, (unit,), (0, 0), share)
            found.append((t, -booked, order, slot))
            break
    found.sort(key=lambda item: item[:3])
    return [slot for *_, slot in found[:limit]]
