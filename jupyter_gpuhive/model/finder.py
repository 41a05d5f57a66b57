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
  the sweep visits them in order with a bit mask of the usable units per host (or one for all
  hosts, when the units may span hosts);
- per host, the groups a request may draw from are precomputed: all GPUs (same host), the
  NVLink cliques (all pairs NVLink-connected), the NUMA nodes, or their intersections; a
  group works when it holds `count` usable units (one bit mask AND and a popcount).

The answers (the contract; tests/support/finder_cases.py `brute_force_all` enumerates it):

- a *unit set* fits when it has `count` units of the kind asked for, each usable over
  [start, start + duration) (free, allowed, within [not_before, deadline]), in one group
  (one host, NVLink clique, NUMA node, as asked), and the limits (`accept`) take it;
- its *cost* at a start: each unit costs (for a slice: the free slices of its GPU; the free
  candidate units of its host), summed; lower is better: it packs work onto GPUs and hosts
  already in use and keeps whole GPUs and whole hosts free; ties go to the units' order
  ('host', index, slice);
- *keys*: each host; for a request that may span hosts, also "any hosts". A key offers an
  answer at a start `t` when `t` is `not_before`, an instant in `Inputs.wake`, or an instant
  at which one of the key's units becomes usable (a slot starts when something frees up, not
  at every second); the answer is the key's cheapest fitting set at `t`. So each host that
  can hold the request is offered at each start where it frees up, and a request that may
  span hosts also gets the cheapest split over hosts;
- the list: ranked by (start, cost, units); one answer per unit set and start (two keys may
  pick the same set); a set offered earlier and usable at every instant since is left out
  (the same block, later); once its units were taken in between, it is offered again;
- the first `limit` of that list. What lies after a start cannot change the answers up to
  it, so the sweep stops at the start that fills the list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .core import Gpu
from .shares import WHOLE
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
    vendor: str | None = None  # only hosts of this GPU vendor (the search filters them)
    min_memory_mib: int | None = None
    indices: tuple[int, ...] = ()  # only these GPU indices (on one host)
    host: str | None = None
    limit: int = 5
    share: int | None = None  # a share of one shareable GPU, in millionths (model/shares.py)
    memory_mib: int | None = None  # or: a share holding this much of its GPU's memory

    @property
    def shared(self) -> bool:
        """Whether it asks for a share of one GPU (model/sharefinder.py)."""
        return self.share is not None or self.memory_mib is not None

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
    share: int = WHOLE  # the share of its one GPU, in millionths (model/sharefinder.py)


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
    """The best `want.limit` slots: one per key and start, ranked (see the module's text)."""
    d, low, high = want.duration, want.not_before, want.deadline
    if high - low < d or want.count < 1:
        return []
    lay = _layout(want, inputs.units, inputs.topology)
    cands, bit, host_of = lay.cands, lay.bit, lay.host_of
    if len(cands) < want.count:
        return []
    by_host, spanning = _keys(want, lay)
    eff = effective_busy(inputs.units, inputs.busy, inputs.removed, lay.live)
    events: list[tuple[int, int, int]] = []
    whole = [(low, high)]
    for pos, unit in enumerate(cands):
        if not lay.masks[host_of[pos]]:
            continue
        allowed = whole if inputs.allowed is None else merge(inputs.allowed.get(unit.id, ()))
        for a, z in windows(free_spans(eff[unit.id], allowed, low, high), d):
            events.append((a, 1, pos))
            events.append((z + 1, 0, pos))
    events.extend((t, 2, -1) for t in inputs.wake if low <= t <= high - d)
    events.sort()
    free = dict.fromkeys(lay.hosts, 0)
    gone = [low - 1] * len(cands)  # per candidate: when it last stopped being usable
    last: dict[frozenset[int], int] = {}  # unit ids -> the start of their latest answer
    found: list[Slot] = []
    k, i, n = want.count, 0, len(events)
    while i < n:
        t = events[i][0]
        touched: set[str] = set()
        while i < n and events[i][0] == t:
            _, kind, pos = events[i]
            i += 1
            if kind == 0:
                free[host_of[pos]] &= ~bit[pos]
                gone[pos] = t
            elif kind == 1:
                free[host_of[pos]] |= bit[pos]
                touched.add(cands[pos].host)
            else:
                touched.update(by_host)
        if t > high - d:
            break
        due = [key for h in sorted(touched) for key in by_host.get(h, ())]
        if spanning is not None and touched:
            due.append(spanning)
        ready = [x for x in due if any((m & free[x.layout]).bit_count() >= k for m in x.masks)]
        if not ready or (inputs.accept is not None and not inputs.accept(t, t + d, k)):
            continue
        batch: dict[frozenset[int], Slot] = {}
        for key in ready:
            cost, chosen = _best(want, cands, key.positions, key.masks, free[key.layout], bit)
            ids = frozenset(cands[p].id for p in chosen)
            before = last.get(ids)
            if ids in batch or (before is not None and all(gone[p] <= before for p in chosen)):
                continue  # the same units at this start, or in the same free stretch
            batch[ids] = Slot(t, t + d, tuple(cands[p] for p in chosen), cost)
        last.update(dict.fromkeys(batch, t))
        found.extend(sorted(batch.values(), key=lambda s: (s.cost, [unit_key(u) for u in s.units])))
        if len(found) >= want.limit:
            break
    return found[: want.limit]


@dataclass(frozen=True)
class _Key:
    """Where one answer per start may come from: one host's units, or (a request that may
    span hosts) all of them; `layout` names its bit space in `_Layout.masks`."""

    layout: str
    positions: tuple[int, ...]
    masks: tuple[int, ...]


def _keys(want: Want, lay: _Layout) -> tuple[dict[str, list[_Key]], _Key | None]:
    """The keys of each host, and the key of all hosts (None: the units must share one)."""
    by_host: dict[str, list[_Key]] = {}
    spanning = None
    for name, positions in lay.members.items():
        masks = lay.masks[name]
        if not masks:
            continue
        if want.together:
            by_host[name] = [_Key(name, tuple(positions), tuple(masks))]
            continue
        spanning = _Key(name, tuple(positions), tuple(masks))
        for host in dict.fromkeys(lay.cands[p].host for p in positions):
            mine = tuple(p for p in positions if lay.cands[p].host == host)
            own = sum(lay.bit[p] for p in mine)
            kept = tuple(m & own for m in masks if (m & own).bit_count() >= want.count)
            by_host[host] = [_Key(name, mine, kept)] if kept else []
    return by_host, spanning


def _best(
    want: Want,
    cands: Sequence[Gpu],
    positions: Sequence[int],
    masks: Sequence[int],
    free: int,
    bit: Sequence[int],
) -> tuple[tuple[int, int], tuple[int, ...]]:
    """The cheapest choice (positions) of `want.count` free units among `positions`, within
    one of `masks`, at the current instant."""
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
    assert best is not None
    return best[0], tuple(best[2])
