"""Holders of a failed or drained GPU are told, with the earliest-slot finder's best alternative.

When a GPU fails its health check or an admin drains it, every reservation on it (or on one of
its MIG slices) that is running or starts within a week gets a notice of kind `gpu-health`
through the protection handlers of `health_handlers` (default: the Lab notice, `event`; add
`mail` where mail is configured). The notice names the GPU, why, and the finder's first answer
for the same number of GPUs and the remaining length (`alternative`), which the `gpu.health`
webhook event carries too. The notice closes when the GPU is bookable again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import HiveError
from ..model import Identity, Reservation, describe_instant
from ..model.finder import Slot, Want
from ..model.health import GpuCondition
from ..model.violations import GPU_HEALTH, Violation
from ..store import Store
from .handlers.base import Incident

if TYPE_CHECKING:
    from .service import Protection

log = logging.getLogger(__name__)
AHEAD = timedelta(days=7)  # as the gpu.health webhook event: running now or within a week
Search = Callable[[Identity, Want], Awaitable[tuple[Want, list[Slot]]]]
Notify = Callable[[Incident, Sequence[str], Mapping[str, Any]], None]


class Finder(Protocol):
    """What the notices use of the bookings service: its finder and its site's policy."""

    policy: Any  # .zone: the site's time zone

    async def search(self, who: Identity, want: Want) -> tuple[Want, list[Slot]]: ...


def slot_json(slot: Slot) -> dict[str, Any]:
    """A finder answer as the notice and the webhook event give it."""
    return {
        "gpus": [u.ref for u in slot.units],
        "start": datetime.fromtimestamp(slot.start, UTC).isoformat(),
        "end": datetime.fromtimestamp(slot.end, UTC).isoformat(),
    }


def what_happened(ref: str, condition: GpuCondition) -> str:
    """'failed its health check (reasons)' or 'was drained for maintenance by X: why'."""
    return condition.what_happened()


class HealthNotices:
    """Tells holders of failed or drained GPUs (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        run: Callable[..., Awaitable[Any]],
        search: Search,
        notify: Notify,
        unix_user: Callable[[str], str],
        handlers: Sequence[str],
        level: int,
        zone: tzinfo = UTC,
    ) -> None:
        self.store = store
        self._run = run
        self._search = search
        self._notify = notify
        self._unix_user = unix_user
        self.handlers = tuple(handlers)
        self.level = level
        self.zone = zone  # the site's: times in a notice read on its clock
        self._open: dict[tuple[int, int], int] = {}  # (reservation, GPU id) -> notice id

    @classmethod
    def of(
        cls,
        protection: Protection,
        store: Store,
        run: Callable[..., Awaitable[Any]],
        bookings: Finder,
    ) -> HealthNotices:
        """Notices through `protection`'s handlers named in its `health_handlers` setting, with
        the alternatives of `bookings`' finder and times on its site's clock."""
        s = protection.settings
        told = [n for n in s.health_handlers if n in protection.handlers]
        return cls(store, run, bookings.search, protection.notify, protection.unix_user, told,
                   s.level, bookings.policy.zone)  # fmt: skip

    def then(
        self,
        after: Callable[[dict[int, GpuCondition], dict[int, Any]], Awaitable[None]],
        clock: Callable[[], datetime],
    ) -> Callable[[dict[int, GpuCondition]], Awaitable[None]]:
        """A listener for health changes: tell the holders, then `after` (the webhook events)
        with the alternatives found; a failure to tell costs the notices, not the events."""

        async def changed(conditions: dict[int, GpuCondition]) -> None:
            offers: dict[int, Any] = {}
            try:
                offers = await self.tell(conditions, clock())
            except Exception:
                log.exception("gpuhive: telling the holders of changed GPUs failed")
            await after(conditions, offers)

        return changed

    async def tell(
        self, changed: Mapping[int, GpuCondition], now: datetime
    ) -> dict[int, dict[str, Any] | None]:
        """Tell the holders of GPUs that became unbookable; {reservation id: alternative}."""
        inventory = self.store.inventory
        whole = {g: c for g, c in changed.items() if not inventory.gpu_by_id(g).is_slice}
        back = [key for key in self._open if key[1] in whole and whole[key[1]].bookable]
        if back:
            await self._run(
                self.store.violations.sync, now, (), None, [self._open[k] for k in back]
            )
            for key in back:
                del self._open[key]
        bad = {g: c for g, c in whole.items() if not c.bookable}
        if not bad:
            return {}
        units = list(changed)
        held: list[Reservation] = await self._run(
            self.store.reservations.window, now, now + AHEAD, gpu_ids=units
        )
        offers: dict[int, dict[str, Any] | None] = {}
        for gpu_id, condition in bad.items():
            for res in held:
                mine = any(g.id == gpu_id or g.parent_id == gpu_id for g in res.gpus)
                if res.cancelled or not mine or (res.id, gpu_id) in self._open:
                    continue
                if res.id not in offers:
                    offers[res.id] = await self.alternative(res, now)
                await self._tell(res, gpu_id, condition, offers[res.id], now)
        return offers

    async def alternative(self, res: Reservation, now: datetime) -> dict[str, Any] | None:
        """The finder's first answer for as many GPUs (or slices) for the rest of `res`."""
        start = max(now, res.start)
        slices = any(g.is_slice for g in res.gpus)
        want = Want(
            count=len(res.gpus),
            duration=max(60, int((res.end - start).total_seconds())),
            not_before=int(start.timestamp()),
            deadline=0,
            slices=slices,
            limit=1,
        )
        try:
            _, found = await self._search(Identity(res.owner), want)
        except HiveError as error:  # no GPUs left, a length the policy refuses: no offer
            log.info("gpuhive: no alternative for reservation %d: %s", res.id, error)
            return None
        return slot_json(found[0]) if found else None

    async def _tell(
        self,
        res: Reservation,
        gpu_id: int,
        condition: GpuCondition,
        offer: dict[str, Any] | None,
        now: datetime,
    ) -> None:
        gpu = self.store.inventory.gpu_by_id(gpu_id)
        when = lambda iso: describe_instant(datetime.fromisoformat(iso), self.zone)  # noqa: E731
        text = (
            f"GPU {gpu.ref} of your reservation {res.id} ('{res.title}', until "
            f"{describe_instant(res.end, self.zone)}) {what_happened(gpu.ref, condition)}."
        )
        if offer:
            text += (
                f" The earliest alternative: {', '.join(offer['gpus'])} from "
                f"{when(offer['start'])} to {when(offer['end'])} (book it in the GPU sidebar "
                "or with %gpureserve; %gpureserve N --earliest finds more)."
            )
        else:
            text += " No alternative is free now; %gpureserve N --earliest finds the earliest."
        record = Violation(
            GPU_HEALTH, gpu.host, gpu.ref, gpu.uuid, None, res.owner, res.id, self.level,
            (), (), text, now,
        )  # fmt: skip
        try:
            (vid,) = await self._run(self.store.violations.sync, now, [record], None, ())
        except Exception:
            log.exception("gpuhive: could not record the health notice of reservation %d", res.id)
            return
        self._open[(res.id, gpu_id)] = vid
        incident = Incident.of(
            vid, record, self._unix_user(res.owner), res.title, res.end, self.zone
        )
        self._notify(incident, self.handlers, {})
