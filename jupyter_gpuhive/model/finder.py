"""The earliest-slot finder: when can I get N GPUs (or MIG slices) that fit my constraints.

Pure: it gets every bookable unit (`Gpu`, whole GPUs and slices), the spans each is booked or
claimed, the spans the requester may use each (access rules; None: all), the hosts' topology,
and a predicate for the requester's fair-share limits; it returns the best few slots.

How it works (a sweep line):

- each candidate unit (one that matches the request's kind, profile, model, memory, host and
  indices) gets its *effective* busy spans: its own, plus the conflicting units' (a whole
  GPU conflicts with each of its slices and the reverse; slices of one GPU do not conflict);
- free time is the allowed spans minus the busy ones, within [not_before, deadline]; a free
  span [a, b) of at least the duration gives the *window* of starts [a, b - duration];
- the windows' edges, sorted, are the only instants at which the set of usable units changes;
  a slot can only start where a unit becomes usable, so the sweep checks just those instants
  (and `Inputs.wake`, when the limits may change their answer) for the hosts that gained a
  unit, and stops at the first feasible one;
- per host, the groups a request may draw from are precomputed: all GPUs (same host), the
  NVLink cliques (all pairs NVLink-connected), the NUMA nodes, or their intersections; a
  group works when it holds `count` usable units (one bit mask AND and a popcount).

Ranking: earliest start first; then least fragmentation: each unit costs (for a slice: the
free slices of its GPU; the free candidate units of its host), a slot costs the sum, and
lower is better: it packs work onto GPUs and hosts already in use and keeps whole GPUs and
whole hosts free; then the units' order ('host', index, slice). Within a group the `count`
cheapest units are optimal for that order. A later slot on the very same units as an earlier
answer is left out (it is the same block, later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .core import Gpu
from .topology import Topology, groups_for

Span = tuple[int, int]  # [start, end) in epoch seconds
Accept = Callable[[int, int, int], bool]  # (start, end, count) -> within the limits?


@dataclass(frozen=True)
class Want:
    """What a search asks for; instants in epoch seconds."""

    count: int
    duration: int
    not_before: int
    deadline: int
    slices: bool = False  # count MIG slices, not whole GPUs (implied by a profile)
    profile: str | None = None
    same_host: bool = False
    nvlink: bool = False
    same_numa: bool = False
    model: str | None = None  # a part of the model name, any case
    min_memory_mib: int | None = None
    indices: tuple[int, ...] = ()  # only these GPU indices (on one host)
    host: str | None = None
    limit: int = 5

    @property
    def together(self) -> bool:
        """Whether all units must be on one host."""
        return self.same_host or self.nvlink or self.same_numa or bool(self.indices)


@dataclass(frozen=True)
class Slot:
    """One answer: units free (for the requester) over [start, end), and its cost."""

    start: int
    end: int
    units: tuple[Gpu, ...]
    cost: tuple[int, int]


@dataclass
class Inputs:
    """What the finder reads: the whole inventory, its bookings and the requester's rights."""

    units: Sequence[Gpu]
    busy: Mapping[int, Sequence[Span]]  # unit id -> booked or claimed spans (unsorted)
    allowed: Mapping[int, Sequence[Span]] | None = None  # unit id -> allowed spans; None: all
    topology: Mapping[str, Topology] = field(default_factory=dict)
    accept: Accept | None = None
    wake: Sequence[int] = ()
    removed: Mapping[int, Sequence[Span]] = field(default_factory=dict)  # GPU id -> spans
    # booked on its slices that a re-partition removed (they still keep the whole GPU busy)


def unit_key(unit: Gpu) -> tuple[str, int, int, int, int]:
    """The order of units: host, GPU index, the GPU before its slices, GI, CI."""
    if unit.parent_id is None:
        return (unit.host, unit.index, 0, 0, 0)
    return (unit.host, unit.index, 1, unit.gpu_instance_id or 0, unit.compute_instance_id or 0)


def matches(unit: Gpu, want: Want) -> bool:
    """Whether a unit is of the kind the request asks for (time aside)."""
    if unit.is_slice != (want.slices or want.profile is not None):
        return False
    if want.profile is not None and unit.profile != want.profile:
        return False
    if want.model and (unit.model is None or want.model.lower() not in unit.model.lower()):
        return False
    if want.min_memory_mib is not None and (unit.memory_mib or 0) < want.min_memory_mib:
        return False
    if want.indices and unit.index not in want.indices:
        return False
    return want.host is None or unit.host == want.host


def effective_busy(
    units: Sequence[Gpu],
    busy: Mapping[int, Sequence[Span]],
    removed: Mapping[int, Sequence[Span]] | None = None,
    only: Sequence[Gpu] | None = None,
) -> dict[int, list[Span]]:
    """Per unit id (of `only`, default all), its busy spans with those of the units it
    conflicts with, merged."""
    by_id = {u.id: u for u in units}
    whole: dict[int, list[Span]] = {}
    parts: dict[int, list[Span]] = {g: list(s) for g, s in (removed or {}).items()}
    for unit_id, spans in busy.items():
        unit = by_id.get(unit_id)
        if unit is not None and spans:
            (parts if unit.is_slice else whole).setdefault(unit.device_id, []).extend(spans)
    out = {}
    for unit in units if only is None else only:
        if unit.is_slice:
            spans = [*busy.get(unit.id, ()), *whole.get(unit.device_id, ())]
        else:
            spans = [*whole.get(unit.id, ()), *parts.get(unit.id, ())]
        out[unit.id] = merge(spans)
    return out


def merge(spans: Sequence[Span]) -> list[Span]:
    """Sorted, disjoint spans covering the same time; touching spans join."""
    out: list[Span] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def free_spans(busy: Sequence[Span], allowed: Sequence[Span], low: int, high: int) -> list[Span]:
    """The parts of the merged `allowed` spans within [low, high) outside the merged `busy`."""
    out: list[Span] = []
    i = 0
    for a, b in allowed:
        a, b = max(a, low), min(b, high)
        while i < len(busy) and busy[i][1] <= a:
            i += 1
        j = i
        while a < b:
            if j < len(busy) and busy[j][0] < b:
                if busy[j][0] > a:
                    out.append((a, busy[j][0]))
                a = max(a, busy[j][1])
                j += 1
            else:
                out.append((a, b))
                break
    return out


def windows(free: Sequence[Span], duration: int) -> list[Span]:
    """Per free span long enough, the closed range of starts [a, b - duration]."""
    return [(a, b - duration) for a, b in free if b - a >= duration]


@dataclass
class _Layout:
    """The candidates of a request placed on bit masks: per host (or one pseudo-host when the
    units may span hosts) a bit per candidate, and the groups big enough for the count."""

    cands: list[Gpu]
    hosts: list[str]
    members: dict[str, list[int]]
    bit: list[int]
    host_of: list[str]
    masks: dict[str, list[int]]

    @property
    def live(self) -> list[Gpu]:
        """The candidates on hosts with a group big enough (all of them count in the ranking)."""
        return [u for pos, u in enumerate(self.cands) if self.masks[self.host_of[pos]]]


def _layout(want: Want, units: Sequence[Gpu], topology: Mapping[str, Topology]) -> _Layout:
    cands = sorted((u for u in units if matches(u, want)), key=unit_key)
    hosts: list[str] = []
    members: dict[str, list[int]] = {}
    for pos, unit in enumerate(cands):
        host = unit.host if want.together else ""
        if host not in members:
            hosts.append(host)
            members[host] = []
        members[host].append(pos)
    bit = [0] * len(cands)
    host_of = [""] * len(cands)
    masks: dict[str, list[int]] = {}
    for host, positions in members.items():
        for n, pos in enumerate(positions):
            bit[pos], host_of[pos] = 1 << n, host
        groups = groups_for(
            topology.get(host),
            (cands[p].index for p in positions),
            nvlink=want.nvlink,
            same_numa=want.same_numa,
        )
        found = [sum(bit[p] for p in positions if cands[p].index in g) for g in groups or ()]
        masks[host] = [m for m in found if m.bit_count() >= want.count]  # hosts too small: none
    return _Layout(cands, hosts, members, bit, host_of, masks)


def devices_needed(want: Want, units: Sequence[Gpu], topology: Mapping[str, Topology]) -> set[int]:
    """The physical GPUs (ids) whose bookings can matter to `want`: a reader may skip the rest."""
    return {u.device_id for u in _layout(want, units, topology).live}


def find(want: Want, inputs: Inputs) -> list[Slot]:
    """The best `want.limit` slots, earliest first, then cheapest (see the module's text)."""
    d, low, high = want.duration, want.not_before, want.deadline
    if high - low < d or want.count < 1:
        return []
    lay = _layout(want, inputs.units, inputs.topology)
    cands, hosts, members, bit, host_of, masks = (
        lay.cands, lay.hosts, lay.members, lay.bit, lay.host_of, lay.masks
    )  # fmt: skip
    if len(cands) < want.count:
        return []
    eff = effective_busy(inputs.units, inputs.busy, inputs.removed, lay.live)
    events: list[tuple[int, int, int]] = []
    whole = [(low, high)]
    for pos, unit in enumerate(cands):
        if not masks[host_of[pos]]:
            continue
        allowed = whole if inputs.allowed is None else merge(inputs.allowed.get(unit.id, ()))
        for a, z in windows(free_spans(eff[unit.id], allowed, low, high), d):
            events.append((a, 1, pos))
            events.append((z + 1, 0, pos))
    events.extend((t, 2, -1) for t in inputs.wake if low <= t <= high - d)
    events.sort()
    free = dict.fromkeys(hosts, 0)
    found: list[Slot] = []
    seen: set[frozenset[int]] = set()
    k, i, n = want.count, 0, len(events)
    while i < n:
        t = events[i][0]
        touched: set[str] = set()
        while i < n and events[i][0] == t:
            _, kind, pos = events[i]
            i += 1
            if kind == 0:
                free[host_of[pos]] &= ~bit[pos]
            elif kind == 1:
                free[host_of[pos]] |= bit[pos]
                touched.add(host_of[pos])
            else:
                touched.update(hosts)
        if t > high - d:
            break
        ready = [h for h in touched if any((m & free[h]).bit_count() >= k for m in masks[h])]
        if not ready or (inputs.accept is not None and not inputs.accept(t, t + d, k)):
            continue
        batch = []
        for host in ready:
            choice = _best(host, t, want, cands, members[host], masks[host], free[host], bit)
            ids = frozenset(u.id for u in choice[1])
            if ids not in seen:
                seen.add(ids)
                batch.append(Slot(t, t + d, choice[1], choice[0]))
        batch.sort(key=lambda s: (s.cost, [unit_key(u) for u in s.units]))
        found.extend(batch)
        if len(found) >= want.limit:
            break
    return found[: want.limit]


def _best(
    host: str,
    t: int,
    want: Want,
    cands: Sequence[Gpu],
    positions: Sequence[int],
    masks: Sequence[int],
    free: int,
    bit: Sequence[int],
) -> tuple[tuple[int, int], tuple[Gpu, ...]]:
    """The cheapest choice of `want.count` free units of one host (or of all, when the
    request may span hosts) at instant `t`."""
    usable = [p for p in positions if free & bit[p]]
    per_host: dict[str, int] = {}
    per_gpu: dict[int, int] = {}
    for p in usable:
        unit = cands[p]
        per_host[unit.host] = per_host.get(unit.host, 0) + 1
        per_gpu[unit.device_id] = per_gpu.get(unit.device_id, 0) + 1

    def cost(p: int) -> tuple[int, int]:
        unit = cands[p]
        return (per_gpu[unit.device_id] if unit.is_slice else 0, per_host[unit.host])

    best: tuple[tuple[int, int], list[tuple[str, int, int, int, int]], list[int]] | None = None
    for mask in masks:
        inside = [p for p in usable if mask & bit[p]]
        if len(inside) < want.count:
            continue
        chosen = sorted(inside, key=lambda p: (cost(p), unit_key(cands[p])))[: want.count]
        chosen.sort(key=lambda p: unit_key(cands[p]))
        total = (sum(cost(p)[0] for p in chosen), sum(cost(p)[1] for p in chosen))
        keys = [unit_key(cands[p]) for p in chosen]
        if best is None or (total, keys) < (best[0], best[1]):
            best = (total, keys, chosen)
    assert best is not None, host
    return best[0], tuple(cands[p] for p in best[2])
