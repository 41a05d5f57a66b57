"""The earliest-slot search: gathers what the pure finder (`model.finder`) needs, in bulk.

It reads the inventory (whole GPUs and live MIG slices) and the hosts' topology from memory,
and every live booking span of the searched window in one statement; it adds the claims of
running queued jobs (their units until their walltime ends), the spans the access rules allow
the requester on each unit, and the requester's fair-share limits as a predicate on
(start, end, count). It searches a short window first and widens it only when that window
holds fewer answers than asked for: what lies beyond a window cannot change the slots inside
it, so the answers are those of a search of the whole window at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import Conflict, Invalid
from ..model import Gpu, Identity, describe_duration, utcnow
from ..model.finder import Inputs, Slot, Span, Want, devices_needed, find
from ..model.health import none_bookable
from ..model.rules import Rule
from ..model.shares import WHOLE, fraction, memory_of_share
from ..store import Store
from . import access
from .limits import WEEK, LimitExceeded, LimitInvalid, Proposal, check
from .sharesearch import check_share_want, search_shares

if TYPE_CHECKING:
    from .quotas import LimitService
    from .reservations import Policy

MAX_COUNT = 64
MAX_ANSWERS = 20
FIRST_WINDOW = timedelta(days=1)
NO_HOSTS = (
    "No GPU hosts are configured, so there is nothing to book yet. Add one with "
    "`jupyter gpuhive hosts add gpu1 gpu1.example.org --user $USER` (then `jupyter gpuhive key` "
    "and `jupyter gpuhive trust gpu1`), or try gpuhive on simulated GPUs: `jupyter gpuhive sim up`."
)


def instant(seconds: int) -> datetime:
    """An epoch second as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


class Vendors(Protocol):
    """The site's GPU vendors, as the search asks them (jobs.selection.SiteVendors)."""

    def check(self, name: str) -> str:
        """A vendor's name as hosts give it (Invalid, naming the known ones: unknown)."""
        ...

    def of(self, host: str) -> str:
        """A host's GPU vendor."""
        ...


class SlotSearch:
    """`search(who, want)`: the best slots for `who`; synchronous (run it in a thread)."""

    def __init__(
        self,
        store: Store,
        policy: Policy,
        limits: Callable[[], LimitService | None],
        clock: Callable[[], datetime] = utcnow,
        default_walltime: timedelta = timedelta(hours=1),
    ) -> None:
        self.store = store
        self.policy = policy
        self.limits = limits
        self.now = clock
        self.default_walltime = default_walltime
        self._units: tuple[int, list[Gpu]] | None = None

    def check(self, want: Want, now: int) -> Want:
        """The request with its defaults; Invalid (422): what is wrong; Conflict (409): no GPUs."""
        self.require_gpus()  # first: with no GPUs at all, nothing else matters
        p = self.policy
        if not 1 <= want.count <= MAX_COUNT:
            raise Invalid(f"'count' must be from 1 to {MAX_COUNT}.")
        if want.indices and want.count != len(set(want.indices)):
            raise Invalid(
                f"'indices' names {len(set(want.indices))} GPUs but 'count' is {want.count}; "
                "leave 'count' out or make them agree."
            )
        if want.shared:
            check_share_want(want)
        if want.nvlink and (want.slices or want.profile):
            raise Invalid("'nvlink' applies to whole GPUs; MIG slices have no NVLink peers.")
        length = timedelta(seconds=want.duration)
        if not p.min_length <= length <= p.max_length:
            raise Invalid(
                f"'duration' must be from {describe_duration(p.min_length)} to "
                f"{describe_duration(p.max_length)}; it is {describe_duration(length)}."
            )
        if not 1 <= want.limit <= MAX_ANSWERS:
            raise Invalid(f"'limit' must be from 1 to {MAX_ANSWERS}.")
        low = max(want.not_before, now)
        latest = now + int(p.horizon.total_seconds()) + want.duration
        high = min(want.deadline, latest) if want.deadline else latest
        if want.deadline and want.deadline <= now:
            raise Invalid("'deadline' is in the past.")
        if high - low < want.duration:
            raise Invalid(
                "No slot of that length fits between 'not_before' and 'deadline' (slots may "
                f"start at most {describe_duration(p.horizon)} ahead)."
            )
        if want.host is not None and self.store.inventory.host(want.host) is None:
            raise Invalid(f"Unknown host '{want.host}'.")
        return replace(want, not_before=low, deadline=high)

    def require_gpus(self) -> None:
        """Conflict (409) with the next step when there is no GPU to search at all."""
        if self._inventory():
            return
        hosts = sorted(h.name for h in self.store.inventory.hosts())
        if not hosts:
            raise Conflict(NO_HOSTS)
        closed = self.store.health.unbookable()
        named = [(g.ref, closed[g.id]) for g in self.store.inventory.gpus() if g.id in closed]
        if named:  # GPUs there are, but every one is failed or drained
            raise Conflict(none_bookable(named))
        raise Conflict(
            f"None of the GPU hosts ({', '.join(hosts)}) has reported GPUs yet; the GPU sidebar "
            "and %gpustatus say why: a host that is down, or its GPU tool failing there."
        )

    def search(
        self, who: Identity, want: Want, vendors: Vendors | None = None
    ) -> tuple[Want, list[Slot]]:
        """The checked request and its best slots, earliest first; `vendors`: the hosts' GPU
        vendors, for a request that names one (without them it is refused)."""
        now = int(self.now().timestamp())
        want = self.check(want, now)
        units = self._inventory()
        if want.vendor is not None:
            if vendors is None:
                raise Invalid("This search does not know the hosts' GPU vendors; leave out "
                              "'vendor'.")  # fmt: skip
            want = replace(want, vendor=vendors.check(want.vendor))
            of = {host: vendors.of(host) for host in {u.host for u in units}}
            units = [u for u in units if of[u.host] == want.vendor]
        accept, wake = self._limits(who, want, now)
        if want.shared:

            def rules_allow(
                units: Sequence[Gpu], low: int, high: int
            ) -> Mapping[int, list[Span]] | None:
                return self.allowed_spans(who, units, low, high)

            found = search_shares(self.store, self.default_walltime, rules_allow, want, units, now,
                                  accept, wake)  # fmt: skip
            return want, found
        topology = self.store.topology.all()
        rules = self.store.rules.all()
        window = max(FIRST_WINDOW, 4 * timedelta(seconds=want.duration))
        devices = devices_needed(want, units, topology)  # read only their bookings
        while True:
            high = min(want.deadline, want.not_before + int(window.total_seconds()))
            busy, removed = self._busy(units, want.not_before, high, now, devices)
            allowed = self._allowed(rules, who, units, want.not_before, high)
            inputs = Inputs(units, busy, allowed, topology, accept, wake, removed)
            found = find(replace(want, deadline=high), inputs)
            if len(found) >= want.limit or high >= want.deadline:
                return want, found
            window *= 4

    def _inventory(self) -> list[Gpu]:
        """Every bookable unit (live slices included), rebuilt when the inventory reloads."""
        inventory = self.store.inventory
        if self._units is None or self._units[0] != inventory.version:
            self._units = (inventory.version,
                           [u for host in inventory.hosts() for u in _units(host)])  # fmt: skip
        closed = self.store.health.unbookable()  # failed or drained GPUs: not offered
        if not closed:
            return self._units[1]
        return [u for u in self._units[1] if u.id not in closed and u.parent_id not in closed]

    def _busy(
        self, units: list[Gpu], low: int, high: int, now: int, devices: set[int]
    ) -> tuple[dict[int, list[Span]], dict[int, list[Span]]]:
        known = {u.id for u in units}
        busy: dict[int, list[Span]] = {}
        removed: dict[int, list[Span]] = {}
        every = sum(1 for u in units if not u.is_slice)
        chosen = devices if len(devices) < every else None  # all: no list to send
        spans = self.store.finder.spans(instant(low), instant(high), chosen)
        for unit, device, start, end in spans:
            if unit in known:
                busy.setdefault(unit, []).append((start, end))
            else:  # a slice a re-partition removed: it keeps its whole GPU busy
                removed.setdefault(device, []).append((start, end))
        inventory = self.store.inventory
        for uuid, _job, until, since in self.store.finder.running_claims(
            instant(now), self.default_walltime
        ):
            held = inventory.gpu(uuid) if uuid else None
            if held is not None:
                busy.setdefault(held.id, []).append((min(since, now), until or high + 1))
        return busy, removed

    def allowed_spans(
        self, who: Identity, units: Sequence[Gpu], low: int, high: int
    ) -> Mapping[int, list[Span]] | None:
        """Per unit, the spans of [low, high) the access rules allow `who` (None: all)."""
        return self._allowed(self.store.rules.all(), who, list(units), low, high)

    def _allowed(
        self, rules: list[Rule], who: Identity, units: list[Gpu], low: int, high: int
    ) -> Mapping[int, list[Span]] | None:
        if not rules or who.is_admin:
            return None
        return _Allowed(rules, who, {u.id: u for u in units}, instant(low), instant(high),
                        self.policy.zone)  # fmt: skip

    def _limits(
        self, who: Identity, want: Want, now: int
    ) -> tuple[Callable[[int, int, float], bool] | None, list[int]]:
        """The fair-share check as a predicate, and the instants its answer may change."""
        service = self.limits()
        if service is None or who.is_admin:
            return None, []
        table = service.table(who)
        if table.empty:
            return None, []
        effective = service.effective(who, table)
        if effective.limits.empty:
            return None, []
        moment = instant(now)
        held, upcoming = self.store.limits.standing(
            who.name, moment - WEEK, instant(want.deadline) + WEEK, moment, merged=True
        )
        zone = self.policy.zone
        try:  # the length and horizon limits refuse the search itself (422)
            check(effective, Proposal(instant(want.not_before),
                                      instant(want.not_before + want.duration), 0),
                  [], moment, zone, new=False)  # fmt: skip
        except LimitInvalid as error:
            if error.details.get("limit") == "longest":
                raise
        except LimitExceeded:
            pass

        def accept(start: int, end: int, count: float) -> bool:
            proposal = Proposal(instant(start), instant(end), count)
            try:
                check(effective, proposal, held, moment, zone, upcoming_now=upcoming)
            except (LimitExceeded, LimitInvalid):
                return False
            return True

        # where the answer may turn to yes: a held span ends (GPUs at once), or falls out of
        # every 7-day window a slot starting then touches (GPU-hours in any 7 days)
        week = int(WEEK.total_seconds())
        wake = {int(h.end.timestamp()) + lag for h in held for lag in (0, week - want.duration)}
        return accept, sorted(wake)


class _Allowed(Mapping[int, list[Span]]):
    """Per unit id, the spans the rules allow `who` on it: worked out when the finder asks
    (only for the units that match the request), once per set of rules that apply."""

    def __init__(self, rules: list[Rule], who: Identity, units: dict[int, Gpu],
                 start: datetime, end: datetime, zone: tzinfo) -> None:  # fmt: skip
        self.rules = [r for r in rules if r.applies_to(who)]
        self.who, self.units, self.start, self.end, self.zone = who, units, start, end, zone
        self.by_host = not any(r.gpus for r in self.rules)  # then a host's units share rules
        self._cache: dict[object, list[Span]] = {}

    def __getitem__(self, unit_id: int) -> list[Span]:
        unit = self.units[unit_id]
        key: object = unit.host if self.by_host else unit.id
        found = self._cache.get(key)
        if found is None:
            applying = [r for r in self.rules if r.covers_gpu(unit)]
            same = tuple(id(r) for r in applying)  # hosts under the same rules share spans
            found = self._cache.get(same)
            if found is not None:
                self._cache[key] = found
                return found
            found = [(int(a.timestamp()), int(b.timestamp()))
                     for a, b in access.allowed_spans(applying, self.who, unit, self.start,
                                                      self.end, self.zone)]  # fmt: skip
            self._cache[key] = self._cache[same] = found
        return found

    def __iter__(self) -> Iterator[int]:
        return iter(self.units)

    def __len__(self) -> int:
        return len(self.units)


def _units(host: Any) -> list[Gpu]:
    """A host's bookable units (whole GPUs and live slices, when the model has them)."""
    units = getattr(host, "units", None)
    return list(units()) if callable(units) else list(host.gpus)


def slot_json(slot: Slot) -> dict[str, Any]:
    """One answer as the API returns it: what to book (POST reservations) and why it ranks."""
    return {
        "start": instant(slot.start).isoformat(),
        "end": instant(slot.end).isoformat(),
        "gpus": [u.ref for u in slot.units],
        "hosts": sorted({u.host for u in slot.units}),
        "units": [u.to_json() for u in slot.units],
        "fragmentation": {"slice_neighbours_free": slot.cost[0], "host_free": slot.cost[1]},
        "share": fraction(slot.share),  # what to book: POST reservations with this share
        "share_memory_mib": memory_of_share(slot.share, slot.units[0].memory_mib)
        if slot.share < WHOLE
        else None,
    }
