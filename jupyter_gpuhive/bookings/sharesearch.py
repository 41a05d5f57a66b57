"""The earliest share of a GPU for a search (`SlotSearch.search` with 'share' or 'memory'):
the candidate GPUs and their booked shares, handed to the pure `model.sharefinder`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from ..errors import Conflict, Invalid
from ..model import Gpu
from ..model.finder import Slot, Span, Want
from ..model.sharefinder import AcceptShare, Load, earliest_shares
from ..model.shares import WHOLE, describe_memory, share_of_memory
from ..store import Store

# the spans of [low, high) the access rules allow the requester on each unit (None: all)
Allowed = Callable[[Sequence[Gpu], int, int], Mapping[int, list[Span]] | None]


def _instant(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def check_share_want(want: Want) -> None:
    """Invalid (422) for a share request that asks for more than one whole GPU's part."""
    if want.share is not None and want.memory_mib is not None:
        raise Invalid("Give either 'share' (a fraction of the GPU) or 'memory', not both.")
    if want.count != 1:
        raise Invalid(f"A share is of one GPU; 'count' is {want.count}. Leave it out or say 1.")
    if want.slices or want.profile or want.nvlink or want.same_numa:
        raise Invalid(
            "A share is of one whole GPU: leave out 'slices', 'profile', 'nvlink' and 'same_numa'."
        )


def _matches(unit: Gpu, want: Want) -> bool:
    if unit.is_slice or not unit.shareable:
        return False
    if want.host is not None and unit.host != want.host:
        return False
    if want.model is not None and want.model.lower() not in (unit.model or "").lower():
        return False
    if want.indices and unit.index not in want.indices:
        return False
    memory = unit.memory_mib
    least = max(want.min_memory_mib or 0, want.memory_mib or 0)
    return not least or (memory is not None and memory >= least)


def search_shares(
    store: Store,
    walltime: timedelta,
    allowed_spans: Allowed,
    want: Want,
    units: Sequence[Gpu],
    now: int,
    accept: AcceptShare | None,
    wake: Sequence[int],
) -> list[Slot]:
    """The best few GPUs on which `want`'s share fits earliest; Conflict (409) when no GPU of
    the site can hold it at all."""
    candidates = [u for u in units if _matches(u, want)]
    if not candidates:
        shared = [u for u in units if u.shareable and not u.is_slice]
        if not shared:
            raise Conflict(
                "No GPU of this site is shareable: book a whole GPU (its admins mark GPUs "
                "shareable in the hosts configuration)."
            )
        sizes = ", ".join(
            f"{u.ref} ({describe_memory(u.memory_mib)})" if u.memory_mib else u.ref
            for u in shared[:8]
        )
        raise Conflict(f"No shareable GPU matches that request; the shareable GPUs: {sizes}.")

    def share_of(unit: Gpu) -> int:
        if want.memory_mib is not None:
            assert unit.memory_mib is not None  # _matches kept only GPUs with enough memory
            return share_of_memory(want.memory_mib, unit.memory_mib)
        assert want.share is not None
        return want.share

    loads = _loads(store, walltime, candidates, want.not_before, want.deadline, now)
    allowed = allowed_spans(candidates, want.not_before, want.deadline)
    return earliest_shares(
        candidates, loads, share_of, want.duration, want.not_before, want.deadline,
        allowed, accept, wake, want.limit,
    )  # fmt: skip


def _loads(
    store: Store, walltime: timedelta, units: Sequence[Gpu], low: int, high: int, now: int
) -> dict[int, list[Load]]:
    """Per candidate GPU, what is booked on it: shares as they are; a whole GPU, one of its
    MIG slices (removed ones too) or a running queued job's claim (`walltime` when it
    declares none), whole."""
    by_id = {u.id: u for u in units}
    loads: dict[int, list[Load]] = {}
    for unit, device, start, end, share in store.finder.share_loads(
        _instant(low), _instant(high), by_id
    ):
        loads.setdefault(device, []).append((start, end, share if unit == device else WHOLE))
    inventory = store.inventory
    for uuid, _job, until, since in store.finder.running_claims(_instant(now), walltime):
        held = inventory.gpu(uuid) if uuid else None
        if held is not None and held.device_id in by_id:
            span = (min(since, now), until or high + 1, WHOLE)
            loads.setdefault(held.device_id, []).append(span)
    return loads
