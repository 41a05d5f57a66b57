"""Host groups' own settings, set by their administrators for their hosts only (site admins
too): the limits of each user's bookings on the group's hosts, and the no-show times there.

A group's limits apply to every user's bookings on its hosts, counting only what the user
holds there (their bookings' GPUs and their queued jobs' tasks on those hosts), on top of
the site's limits (bookings/quotas.py); site admins, and the group's own administrators on
its hosts, are exempt, as site admins are from the site's. The no-show times replace the
site's `noshow_after` and `noshow_release_after` on the group's hosts
(protection/noshow.py reads them each sweep).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, tzinfo
from typing import Any

from ..errors import NotFound
from ..model import UTC, Identity, Reservation, utcnow
from ..model.authority import HOST_GROUPS, WRITE, Authority
from ..model.hostgroups import HostGroupSettings, NoShowTimes
from ..model.limits import NAMES, Effective, Limits
from ..model.shares import fraction
from ..store import Store
from ..store.limits import LimitReads
from ..store.reservations import PendingWrite
from .budgets import grows
from .limits import WEEK, Proposal, check, over_limits

FOREVER = datetime(9999, 1, 1, tzinfo=UTC)


class HostGroupService:
    """Each declared host group, who administers it, and what they set there."""

    def __init__(
        self,
        store: Store,
        authority: Authority,
        site_noshow: NoShowTimes,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.authority = authority
        self.site_noshow = site_noshow
        self.now = clock

    def listed(self) -> list[dict[str, Any]]:
        """Every declared host group with its administrators, hosts and settings."""
        stored = self.store.host_groups.all()
        return [
            self._shown(name, stored.get(name, HostGroupSettings(name)))
            for name in sorted(self.authority.groups)
        ]

    def one(self, group: str) -> dict[str, Any]:
        self._declared(group)
        return self._shown(group, self.store.host_groups.get(group))

    def _shown(self, name: str, found: HostGroupSettings) -> dict[str, Any]:
        group = self.authority.groups[name]
        noshow = found.noshow.over(self.site_noshow)
        return {
            "name": name,
            "admins": sorted(group.admins),
            "admin_groups": sorted(group.admin_groups),
            "hosts": sorted(self.authority.hosts_of([name])),
            **found.to_json(),
            "noshow_in_force": {**noshow.to_json(), "words": noshow.words()},
        }

    def _declared(self, group: str) -> None:
        if group not in self.authority.groups:
            known = ", ".join(sorted(self.authority.groups)) or "none"
            raise NotFound(f"There is no host group {group!r} (declared: {known}).")

    def _change(self, who: Identity, group: str, what: str) -> HostGroupSettings:
        """The group's stored settings, once `who` may change them (404, 403 otherwise)."""
        self._declared(group)
        self.authority.require(
            who, HOST_GROUPS, WRITE, hosts=self.authority.hosts_of([group]),
            thing=f"they are {what} of host group {group}",
        )  # fmt: skip
        return self.store.host_groups.get(group)

    def set_limits(self, who: Identity, group: str, limits: Limits | None) -> dict[str, Any]:
        """Set (None: forget) the limits of each user's bookings on the group's hosts."""
        found = self._change(who, group, "the limits")
        saved = self.store.host_groups.put(
            replace(found, limits=limits or Limits()), who.name, self.now()
        )
        return self._shown(group, saved)

    def set_noshow(self, who: Identity, group: str, times: NoShowTimes | None) -> dict[str, Any]:
        """Set (None: forget) the no-show times on the group's hosts."""
        found = self._change(who, group, "the no-show settings")
        saved = self.store.host_groups.put(
            replace(found, noshow=times or NoShowTimes()), who.name, self.now()
        )
        return self._shown(group, saved)


class GroupLimits:
    """The booking guard's part for host groups' limits (in the booking's transaction)."""

    def __init__(
        self, authority: Authority, zone: tzinfo, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.authority = authority
        self.zone = zone
        self.now = clock

    def __call__(self, reads: LimitReads, booking: PendingWrite, owner: Identity) -> None:
        """Refuse (409/422) a booking that breaks the limits of a host group it is in."""
        if owner.is_admin or not self.authority.groups or not grows(booking):
            return
        stored = reads.group_limits()
        if not stored:
            return
        ids: dict[str, int] = {}
        for host in reads.hosts_of(booking.gpu_ids).values():
            group = self.authority.host_group(host)
            if group is not None and group.name in stored and host not in owner.admin_hosts:
                ids[group.name] = ids.get(group.name, 0) + 1
        if not ids:
            return
        reads.lock_owner(owner.name)  # before reading what they hold
        now, old = self.now(), booking.old
        exclude = old.id if old is not None else None
        for name, count in sorted(ids.items()):
            limits, on = stored[name], self.authority.hosts_of([name])
            effective = Effective(limits, {n: _where(name) for n in NAMES})
            held = reads.holdings_on(
                owner.name, on, booking.start - WEEK, booking.end + WEEK, now, exclude
            )
            upcoming = 0
            if old is None and limits.upcoming is not None:
                upcoming = reads.upcoming_on(owner.name, on, now)
            proposal = Proposal(booking.start, booking.end, count * fraction(booking.share))
            check(effective, proposal, held, now, self.zone, new=old is None,
                  upcoming_now=upcoming)  # fmt: skip

    def flags(
        self, store: Store, live: Sequence[Reservation], identity_of: Callable[[str], Identity]
    ) -> dict[int, str]:
        """Why each of `live` is over a host group's limits (one lowered below what its
        owner holds on the group's hosts; only those that are)."""
        if not self.authority.groups:
            return {}
        stored = store.limits.group_limits()
        now = self.now()
        found: dict[int, str] = {}
        for name, limits in sorted(stored.items()):
            on = self.authority.hosts_of([name])
            effective = Effective(limits, {n: _where(name) for n in NAMES})
            for owner in sorted({r.owner for r in live if {g.host for g in r.gpus} & on}):
                who = identity_of(owner)
                if who.is_admin or on <= who.admin_hosts:
                    continue  # exempt there
                held = store.limits.on_groups(owner, on, now - WEEK, FOREVER, now)
                for rid, why in over_limits(effective, held, now, self.zone).items():
                    found.setdefault(rid, f"{why.rstrip('.')} (host group {name}'s limit).")
        return found


def _where(group: str) -> str:
    return f"the limit of host group {group}, on its hosts"
