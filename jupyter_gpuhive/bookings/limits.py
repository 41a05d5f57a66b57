"""Fair-share limit checks: pure functions of what a user holds and what they ask for.

What a user holds (`Held`s): their reservations that are not cancelled, with their real
span (a reservation ended early counts until it ended), and their running queued jobs.

How queued jobs count: a queued job waiting in the queue counts for nothing. Once the queue
starts it, it holds its GPUs from its start until its walltime runs out (until it ended, once
it has), and counts like a reservation towards "GPUs held at once" and "GPU-hours in any
7 days". It never counts as an upcoming reservation, and the length and horizon limits are
about reservations only. The queue itself is not held back by limits: it only runs jobs in
time nobody booked and stops them before a reservation begins, so a queued job never keeps
anyone from booking; what it holds does, however, leave its owner less to book.

A refusal names the limit, the current figure and what would fit. Limits that depend on
what the user already holds (GPUs at once, GPU-hours, upcoming reservations) answer 409;
the length and horizon limits, which no other booking changes, answer 422.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta, tzinfo

from ..errors import Conflict, Invalid
from ..model import describe_duration
from ..model.limits import Effective
from ..store.limits import Held

WEEK = timedelta(days=7)
_EPS = 1e-6


@dataclass(frozen=True)
class Proposal:
    """A booking to check: new, or an edit of reservation `editing`."""

    start: datetime
    end: datetime
    gpus: float  # a share of a GPU counts its part (0.25)
    editing: int | None = None


def _limit_details(
    name: str, allowed: float, current: float, needed: float, fits: float
) -> dict[str, object]:
    """What a refusal's JSON carries besides its message."""
    return {"limit": name, "allowed": _num(allowed), "current": _num(current),
            "needed": _num(needed), "fits": _num(max(0.0, fits))}  # fmt: skip


class LimitExceeded(Conflict):
    """A booking would take its owner above a limit that depends on what they hold (409)."""

    def __init__(self, message: str, reason: str, **details: object) -> None:
        super().__init__(message, **details)
        self.reason = reason


class LimitInvalid(Invalid):
    """A booking is longer or further ahead than its owner's limits allow (422)."""

    def __init__(self, message: str, reason: str, **details: object) -> None:
        super().__init__(message, **details)
        self.reason = reason


def _num(value: float) -> float:
    return round(value, 2) if abs(value - round(value)) > _EPS else float(round(value))


def _words(value: float) -> str:
    return f"{_num(value):g}"


def _plural(count: float, word: str) -> str:
    return f"{_words(count)} {word}{'' if abs(count - 1) < _EPS else 's'}"


def local_span(start: datetime, end: datetime, zone: tzinfo) -> str:
    """A span in the site's time: 'Nov 17–23' for whole days, else with clock times."""
    a, b = start.astimezone(zone), end.astimezone(zone)
    if a.time() == b.time() == datetime.min.time():
        last = b - timedelta(days=1)
        if last.date() == a.date():
            return f"{a:%b} {a.day}"
        tail = f"{last.day}" if last.month == a.month else f"{last:%b} {last.day}"
        return f"{a:%b} {a.day}–{tail}"
    if a.date() == b.date():
        return f"{a:%b} {a.day} {a:%H:%M}–{b:%H:%M}"
    return f"{a:%b} {a.day} {a:%H:%M}–{b:%b} {b.day} {b:%H:%M}"


# --- figures -------------------------------------------------------------------------------


def upcoming(held: Iterable[Held], now: datetime, exclude: int | None = None) -> int:
    """Reservations not yet ended."""
    return sum(
        1 for s in held if s.reservation is not None and s.reservation != exclude and s.end > now
    )


def peak(held: Iterable[Held], start: datetime, end: datetime) -> tuple[float, datetime, datetime]:
    """The most GPUs held at once within [start, end), and the first span it lasts (shares
    count their part)."""
    events: list[tuple[datetime, float]] = []
    for s in held:
        if s.start < end and s.end > start:
            events.append((max(s.start, start), s.gpus))
            events.append((min(s.end, end), -s.gpus))
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at one instant
    best, when, count = 0.0, (start, end), 0.0
    for i, (at, delta) in enumerate(events):
        count += delta
        nxt = events[i + 1][0] if i + 1 < len(events) else end
        if count > best and nxt > at:
            best, when = count, (at, nxt)
        elif count == best and best and when[1] == at and nxt > at:
            when = (when[0], nxt)
    return best, when[0], when[1]


class Cumulative:
    """F(x): the GPU-hours the spans hold before instant x (for rolling windows)."""

    def __init__(self, spans: Iterable[Held]) -> None:
        slopes: dict[float, float] = {}
        for s in spans:
            a, b = s.start.timestamp(), s.end.timestamp()
            if b > a and s.gpus:
                slopes[a] = slopes.get(a, 0.0) + s.gpus
                slopes[b] = slopes.get(b, 0.0) - s.gpus
        self.points = sorted(slopes)
        self.values: list[float] = []
        self.slopes: list[float] = []
        value = slope = 0.0
        last = None
        for x in self.points:
            if last is not None:
                value += slope * (x - last) / 3600
            slope += slopes[x]
            self.values.append(value)
            self.slopes.append(slope)
            last = x

    def at(self, x: float) -> float:
        i = bisect.bisect_right(self.points, x) - 1
        if i < 0:
            return 0.0
        return self.values[i] + self.slopes[i] * (x - self.points[i]) / 3600

    def between(self, a: float, b: float) -> float:
        return self.at(b) - self.at(a)


def worst_week(
    held: Sequence[Held], p: Proposal, zone: tzinfo | None = None
) -> tuple[datetime, float, float]:
    """The 7-day window touching the proposal with the most GPU-hours in it (with the
    proposal's): its start, what the user holds in it, and what the proposal adds.

    Many windows often tie; with `zone`, the latest one starting at a local midnight no later
    than the proposal is named, if one ties (it reads best: "Nov 17–23").
    """
    week = WEEK.total_seconds()
    a, b = p.start.timestamp(), p.end.timestamp()
    near = [s for s in held if s.start.timestamp() < b + week and s.end.timestamp() > a - week]
    held_f = Cumulative(near)
    mine = Cumulative([Held(p.start, p.end, p.gpus)])

    def total(t: float) -> tuple[float, float]:
        return held_f.between(t, t + week), mine.between(t, t + week)

    candidates = {a - week, b, a, b - week}
    for s in near:
        for x in (s.start.timestamp(), s.end.timestamp()):
            candidates.update((x, x - week))
    best: tuple[float, float, float] | None = None
    for t in sorted(candidates):
        if a - week <= t <= b:
            have, need = total(t)
            if best is None or have + need > best[1] + best[2] + _EPS:
                best = (t, have, need)
    assert best is not None
    if zone is not None:
        day = p.start.astimezone(zone).date()
        for back in range(8):
            midnight = datetime.combine(day - timedelta(days=back), time(0), zone).timestamp()
            if a - week <= midnight:
                have, need = total(midnight)
                if have + need >= best[1] + best[2] - _EPS:
                    best = (midnight, have, need)
                    break
    return datetime.fromtimestamp(best[0], p.start.tzinfo), best[1], best[2]


# --- the check -----------------------------------------------------------------------------


_DURATION_WORDS = {
    "longest": ("A reservation may last at most {limit} ({source}); this one lasts {value}.",
                "it lasts {value}, longer than the limit of {limit}"),
    "horizon": ("Reservations may start at most {limit} ahead ({source}); this one starts in "
                "{value}.", "it starts {value} ahead, beyond the booking horizon of {limit}"),
}  # fmt: skip


def _duration(effective: Effective, name: str, value: timedelta) -> None:
    """Refuse (422) a length or a start further ahead than a duration limit allows."""
    limit = effective.limits.get(name)
    if limit is None or value <= limit:
        return
    words = {"limit": describe_duration(limit), "value": describe_duration(value),
             "source": effective.source(name)}  # fmt: skip
    message, reason = (text.format(**words) for text in _DURATION_WORDS[name])
    seconds = limit.total_seconds()
    raise LimitInvalid(
        message, reason, **_limit_details(name, seconds, value.total_seconds(),
                                          value.total_seconds(), seconds)
    )  # fmt: skip


def check(
    effective: Effective,
    p: Proposal,
    held: Sequence[Held],
    now: datetime,
    zone: tzinfo,
    *,
    new: bool = True,
    upcoming_now: int | None = None,
) -> None:
    """Refuse (LimitInvalid 422 / LimitExceeded 409) a booking that breaks a limit.

    `held` must hold what overlaps the 7 days around the proposal; `upcoming_now`, when
    given, is how many reservations the user has not ended (else counted from `held`)."""
    lim = effective.limits
    _duration(effective, "longest", p.end - p.start)
    _duration(effective, "horizon", p.start - now)
    others = [s for s in held if s.reservation is None or s.reservation != p.editing]
    if new and lim.upcoming is not None:
        count = upcoming(others, now) if upcoming_now is None else upcoming_now
        if count + 1 > lim.upcoming:
            raise LimitExceeded(
                f"You have {_plural(count, 'upcoming reservation')} and may have at most "
                f"{_words(lim.upcoming)} ({effective.source('upcoming')}); end or cancel one "
                "before booking another.",
                f"{count + 1} upcoming reservations, over the limit of {_words(lim.upcoming)}",
                **_limit_details("upcoming", lim.upcoming, count, 1, lim.upcoming - count),
            )
    if lim.gpus is not None:
        most, a, b = peak(others, p.start, p.end)
        if most + p.gpus > lim.gpus + _EPS:
            span = local_span(a, b, zone) if most else local_span(p.start, p.end, zone)
            raise LimitExceeded(
                f"You would hold {_plural(most + p.gpus, 'GPU')} at once ({span}); your limit is "
                f"{_words(lim.gpus)} ({effective.source('gpus')}). You hold {_words(most)} then "
                f"and this booking needs {_words(p.gpus)}, so at most "
                f"{_words(max(0, lim.gpus - most))} would fit.",
                f"{most + p.gpus} GPUs at once ({span}), over the limit of {_words(lim.gpus)}",
                **_limit_details("gpus", lim.gpus, most, p.gpus, lim.gpus - most),
            )
    if lim.gpu_hours_week is not None:
        start, have, need = worst_week(others, p, zone)
        allowed = lim.gpu_hours_week
        if have + need > allowed + _EPS:
            window = local_span(start, start + WEEK, zone)
            fits = max(0.0, allowed - have)
            example = ""
            if fits > _EPS and p.gpus:
                example = (
                    f" (e.g. {describe_duration(timedelta(hours=fits / p.gpus))} on "
                    f"{_plural(p.gpus, 'GPU')})"
                )
            raise LimitExceeded(
                f"You hold {_words(have)} of your {_plural(allowed, 'GPU-hour')} for {window}; "
                f"this booking needs {_words(need)}, so at most {_words(fits)} would fit"
                f"{example} ({effective.source('gpu_hours_week')}).",
                f"{_words(have + need)} GPU-hours in {window}, over the limit of "
                f"{_words(allowed)} in any 7 days",
                **_limit_details("gpu_hours_week", allowed, have, need, fits),
                window={"start": start.isoformat(), "end": (start + WEEK).isoformat()},
            )


def over_limits(
    effective: Effective, held: Sequence[Held], now: datetime, zone: tzinfo
) -> dict[int, str]:
    """Reservations over the limits (after a limit was lowered): id → why.

    Taken in the order they were booked (ids), each reservation that has not ended is
    checked against those before it that were kept; what breaks a limit is flagged, the
    rest is kept. Ended reservations and queued jobs are always kept.
    """
    if _all_fit(effective, held, now):
        return {}
    return one_by_one(effective, held, now, zone)


def one_by_one(
    effective: Effective, held: Sequence[Held], now: datetime, zone: tzinfo
) -> dict[int, str]:
    """`over_limits` without its shortcut: each reservation checked in turn (quadratic)."""
    kept = [s for s in held if s.reservation is None or s.end <= now]
    flags: dict[int, str] = {}
    pending = sorted(
        (s for s in held if s.reservation is not None and s.end > now),
        key=lambda s: s.reservation or 0,
    )
    for span in pending:
        proposal = Proposal(span.start, span.end, span.gpus)
        try:
            # a started reservation is judged by its length; not by how far ahead it began
            check(effective, proposal, kept, min(now, span.start), zone)
        except (LimitExceeded, LimitInvalid) as error:
            assert span.reservation is not None
            flags[span.reservation] = f"Over the owner's limits: {error.reason}."
            continue
        kept.append(span)
    return flags


def _all_fit(effective: Effective, held: Sequence[Held], now: datetime) -> bool:
    """Whether everything held at once fits every limit, so that nothing can be over them.

    What `over_limits` checks one reservation at a time is a subset of all that is held,
    and each figure (GPUs at once, GPU-hours in a window, upcoming reservations) only grows
    with more held; so if the figures of all of it fit, no reservation is flagged. That is
    O(n log n) and the common case; the one-by-one check is quadratic."""
    lim = effective.limits
    pending = [s for s in held if s.reservation is not None and s.end > now]
    if lim.upcoming is not None and len(pending) > lim.upcoming:
        return False
    for s in pending:
        try:
            _duration(effective, "longest", s.end - s.start)
            _duration(effective, "horizon", s.start - min(now, s.start))
        except LimitInvalid:
            return False
    if not held:
        return True
    first, last = min(s.start for s in held), max(s.end for s in held)
    if lim.gpus is not None and peak(held, first, last)[0] > lim.gpus + _EPS:
        return False
    return lim.gpu_hours_week is None or busiest_week(held) <= lim.gpu_hours_week + _EPS


def busiest_week(held: Iterable[Held]) -> float:
    """The most GPU-hours the spans hold in any 7-day window."""
    spans = list(held)
    f = Cumulative(spans)
    week = WEEK.total_seconds()
    best = 0.0
    # the window's GPU-hours are piecewise linear in its start t: the most is where t or
    # t + 7 days meets a start or an end
    for x in f.points:
        for t in (x, x - week):
            best = max(best, f.between(t, t + week))
    return best
