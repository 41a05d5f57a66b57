"""Access: whether the rules (values in `model.rules`) cover a span of a GPU for someone.

A booking is allowed iff its whole span is covered by the union of the requester's
windows, so adjacent windows and rules chain.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, tzinfo

from ..model import Gpu, Identity
from ..model.rules import DAY_NAMES, EVERYONE, Rule, Span, Window, parse_rule, parse_window

__all__ = [
    "DAY_NAMES",
    "EVERYONE",
    "Rule",
    "Span",
    "Window",
    "allowed_spans",
    "first_gap",
    "merge",
    "parse_rule",
    "parse_window",
    "uncovered",
]


def merge(spans: Iterable[Span]) -> list[Span]:
    """Union of spans as a sorted list of disjoint spans; touching spans join."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def first_gap(covered: Sequence[Span], start: datetime, end: datetime) -> Span | None:
    """The first part of [start, end) not inside the merged `covered` spans, or None."""
    cursor = start
    for low, high in covered:
        if low > cursor:
            return cursor, min(low, end)
        cursor = max(cursor, high)
        if cursor >= end:
            return None
    return (cursor, end) if cursor < end else None


def allowed_spans(
    rules: Iterable[Rule], who: Identity, gpu: Gpu, start: datetime, end: datetime, zone: tzinfo
) -> list[Span]:
    """Merged spans within [start, end) during which `who` may use `gpu`."""
    spans: list[Span] = []
    for rule in rules:
        if rule.applies_to(who) and rule.covers_gpu(gpu):
            spans.extend(rule.spans(start, end, zone))
    return merge(spans)


def uncovered(
    rules: Sequence[Rule],
    who: Identity,
    gpus: Iterable[Gpu],
    start: datetime,
    end: datetime,
    zone: tzinfo,
) -> list[tuple[Gpu, Span]]:
    """For each GPU whose use in [start, end) is not fully allowed, the first gap.

    With no rules at all, everything is allowed (personal mode needs no config);
    admins are never restricted.
    """
    if not rules or who.is_admin:
        return []
    problems = []
    for gpu in gpus:
        gap = first_gap(allowed_spans(rules, who, gpu, start, end, zone), start, end)
        if gap is not None:
            problems.append((gpu, gap))
    return problems
