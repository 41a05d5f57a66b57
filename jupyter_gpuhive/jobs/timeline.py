"""Per-GPU timelines for the queue's plan, and the search for a job's earliest slot.

A `Line` is one GPU seen from now on: from `avail` nothing runs on it (infinity: whatever
holds it has no known end), and its busy spans are disjoint and sorted: bookings and planned
runs (owner None) and the slots the plan keeps for queued jobs (owner: the job id).

`earliest` finds the first time at which `need` of some lines are all free for a length of
time. It jumps from candidate time to candidate time: at `t` each line's own earliest fit
from `t` is computed; if fewer than `need` lines fit at `t`, no time before the `need`-th
smallest of those fits can work either (a line fits at `u` only if its first fit from `t` is
at or before `u`), so the search moves there. Times only grow, through span ends, so it ends.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Collection, Iterable, Sequence

FOREVER = math.inf
EPS = 1e-6  # seconds of overlap that do not count (float noise in start + length)


class Line:
    """One GPU's timeline (see the module doc); spans are merged when first needed."""

    __slots__ = ("_raw", "avail", "highs", "host", "index", "lows", "owners", "uuid")

    def __init__(
        self, uuid: str, host: str, index: int, avail: float, spans: Iterable[tuple[float, float]]
    ) -> None:
        self.uuid, self.host, self.index, self.avail = uuid, host, index, avail
        self._raw: Iterable[tuple[float, float]] | None = spans or None
        self.lows: list[float] = []
        self.highs: list[float] = []
        self.owners: list[int | None] = []

    def _load(self) -> None:
        raw, self._raw = self._raw, None
        if raw is None:
            return
        spans = sorted(raw)
        lows = [low for low, _ in spans]
        highs = [high for _, high in spans]
        if all(a < b for a, b in zip(lows, highs, strict=True)) and all(
            b <= a for a, b in zip(lows[1:], highs, strict=False)
        ):  # already disjoint: the usual case
            self.lows, self.highs, self.owners = lows, highs, [None] * len(lows)
            return
        for low, high in spans:
            if high <= low:
                continue
            if self.highs and low <= self.highs[-1]:
                self.highs[-1] = max(self.highs[-1], high)
                continue
            self.lows.append(low)
            self.highs.append(high)
            self.owners.append(None)

    def fit(self, t: float, length: float, ignore: Collection[int] = ()) -> float:
        """The earliest s ≥ t with [s, s + length) free (infinity: never known to be);
        the spans kept for the jobs in `ignore` do not count."""
        if self._raw is not None:
            self._load()
        s = t if t > self.avail else self.avail
        if s == FOREVER:
            return FOREVER
        lows, highs = self.lows, self.highs
        i = bisect_right(highs, s + EPS)
        if not ignore:
            while i < len(lows) and lows[i] < s + length - EPS:
                s = highs[i]
                i += 1
            return s
        owners = self.owners
        while i < len(lows) and lows[i] < s + length - EPS:
            if owners[i] not in ignore:
                s = highs[i]
            i += 1
        return s

    def free(self, low: float, high: float) -> bool:
        """Whether [low, high) is free on this GPU."""
        return self.fit(low, high - low) == low

    def busy_from(self, t: float) -> tuple[float, int | None]:
        """The start of the first busy span that ends after `t`, and its owner."""
        if self._raw is not None:
            self._load()
        i = bisect_right(self.highs, t)
        if i == len(self.lows):
            return FOREVER, None
        return self.lows[i], self.owners[i]

    def free_since(self, t: float) -> float:
        """When the free time around `t` began: the end of the run or span before it."""
        if self._raw is not None:
            self._load()
        i = bisect_right(self.highs, t + EPS) - 1
        return max(self.avail, self.highs[i]) if i >= 0 else self.avail

    def owners_in(self, low: float, high: float) -> set[int]:
        """The queued jobs whose kept spans overlap [low, high)."""
        if self._raw is not None:
            self._load()
        i = bisect_right(self.highs, low + EPS)
        found = set()
        while i < len(self.lows) and self.lows[i] < high - EPS:
            owner = self.owners[i]
            if owner is not None:
                found.add(owner)
            i += 1
        return found

    def keep(self, low: float, high: float, owner: int) -> None:
        """Keep [low, high) for a queued job (the caller checked that it is free)."""
        if self._raw is not None:
            self._load()
        i = bisect_right(self.lows, low)
        self.lows.insert(i, low)
        self.highs.insert(i, high)
        self.owners.insert(i, owner)

    def release(self, owner: int) -> None:
        """Drop every span kept for `owner`."""
        if self._raw is not None:
            self._load()
        while owner in self.owners:
            i = self.owners.index(owner)
            del self.lows[i], self.highs[i], self.owners[i]


def earliest(
    lines: Sequence[Line],
    need: int,
    start: float,
    length: float,
    limit: float,
    ignore: Collection[int] = (),
) -> tuple[float, list[Line]] | None:
    """The first t in [start, limit) at which `need` lines are free for `length`, and the
    lines free then (at least `need`); None when there is no such t. The spans kept for
    the jobs in `ignore` do not count."""
    if need < 1 or len(lines) < need:
        return None
    lines = [line for line in lines if line.avail < limit]
    if len(lines) < need:
        return None
    fits = [line.fit(start, length, ignore) for line in lines]
    return _earliest(lines, fits, need, start, length, limit, ignore)


def _earliest(
    lines: Sequence[Line],
    fits: list[float],
    need: int,
    t: float,
    length: float,
    limit: float,
    ignore: Collection[int],
) -> tuple[float, list[Line]] | None:
    """`earliest` from `t`, with each line's first fit from `t` already in `fits`."""
    while True:
        nth = sorted(fits)[need - 1] if need > 1 else min(fits)
        if nth >= limit:
            return None
        if nth == t:
            return t, [line for f, line in zip(fits, lines, strict=True) if f == t]
        t = nth
        for i, f in enumerate(fits):
            if f < t:  # a fit at or after t is still the first one from t
                fits[i] = lines[i].fit(t, length, ignore)


def earliest_on_one_host(
    lines: Sequence[Line],
    need: int,
    start: float,
    length: float,
    limit: float,
    ignore: Collection[int] = (),
) -> tuple[float, list[Line]] | None:
    """Like `earliest`, with every line on one host: the host that can start first (ties:
    the first in name order)."""
    by_host: dict[str, list[Line]] = {}
    for line in lines:
        by_host.setdefault(line.host, []).append(line)
    bounds = []
    for host, found in by_host.items():
        if len(found) < need:
            continue
        if need > 1:
            if sorted([line.avail for line in found])[need - 1] >= limit:
                continue  # not enough of its GPUs are free of running work in time
        elif min(line.avail for line in found) >= limit:
            continue
        fits = [line.fit(start, length, ignore) for line in found]
        bound = sorted(fits)[need - 1]
        if bound < limit:
            bounds.append((bound, host, fits))
    bounds.sort(key=lambda b: (b[0], b[1]))
    best: tuple[float, list[Line]] | None = None
    for bound, host, fits in bounds:
        if bound >= limit:
            break
        here = _earliest(by_host[host], fits, need, start, length, limit, ignore)
        if here is not None:
            best = here
            limit = here[0]  # only a strictly earlier host replaces it
    return best


def pick(
    lines: Sequence[Line],
    need: int,
    at: float,
    after: float,
    one_host: bool,
    pack: bool,
) -> list[Line]:
    """`need` of `lines` (all free from `at` to `after`): one host when it suffices (the host
    where `need` fit most tightly), else the fewest hosts (or, with `pack`, the fullest hosts
    first, leaving whole hosts free). Within a host, the lines that became free latest before
    `at` (the least idle time kept for the job), then those busy again soonest after `after`.
    Empty when `one_host` and no host has enough."""
    by_host: dict[str, list[Line]] = {}
    for line in lines:
        by_host.setdefault(line.host, []).append(line)
    for found in by_host.values():
        found.sort(key=lambda ln: (-ln.free_since(at), ln.busy_from(after)[0], ln.index))
    fitting = [found for found in by_host.values() if len(found) >= need]
    if fitting:
        return min(fitting, key=lambda found: (len(found), found[0].host))[:need]
    if one_host:
        return []
    chosen: list[Line] = []
    order = sorted(by_host.values(), key=lambda found: (len(found), found[0].host))
    if not pack:
        order.reverse()
    for found in order:
        chosen += found[: need - len(chosen)]
        if len(chosen) == need:
            return chosen
    return []


__all__ = ["EPS", "FOREVER", "Line", "earliest", "earliest_on_one_host", "pick"]
