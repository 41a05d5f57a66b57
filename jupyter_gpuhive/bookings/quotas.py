"""Limits in force: configuration merged with what admins stored, tiers applied, and the
guard every booking passes inside its own transaction (see `limits` for the rules)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..errors import Forbidden, Invalid, NotFound
from ..model import Identity, Reservation, utcnow
from ..model.limits import Effective, Limits, LimitTable, Tier, apply_tiers
from ..model.shares import fraction
from ..store import Store
from ..store.limits import LimitReads
from ..store.reservations import Guard, PendingWrite
from .budgets import BudgetService, grows
from .hostgroups import FOREVER, GroupLimits
from .limits import WEEK, Proposal, check, over_limits, peak, worst_week

SECOND = timedelta(seconds=1)
Efficiency = Callable[[str], "float | None"]  # user → efficiency (percent) over the window


class LimitService:
    """The limits that apply to each user, the booking guard, and limit changes (admins)."""

    def __init__(
        self,
        store: Store,
        zone: tzinfo,
        configured: LimitTable,
        identity_of: Callable[[str], Identity],
        *,
        efficiency: Efficiency | None = None,
        window: str = "30 days",
        clock: Callable[[], datetime] = utcnow,
        cache_seconds: float = 60.0,
    ) -> None:
        self.store = store
        self.zone = zone
        self.configured = configured
        self.identity_of = identity_of
        self.efficiency = efficiency
        self.window = window
        self.now = clock
        self.cache_seconds = cache_seconds
        self._scores: dict[str, tuple[float, float | None]] = {}
        self.budgets: BudgetService | None = None  # checked with the limits (FairShare sets it)
        # the limits host groups set on their hosts (FairShare sets it; hostgroups.py)
        self.on_groups: GroupLimits | None = None
        self._lock = threading.Lock()

    # --- what applies ------------------------------------------------------------------

    def table(self, who: Identity | None = None, within: LimitReads | None = None) -> LimitTable:
        """Configured limits with the stored entries over them (with `who`: the entries
        that can apply to them; `within`: read in that booking's transaction)."""
        user, groups = (who.name, who.groups) if who is not None else (None, ())
        if within is not None:
            stored, tiers_set = within.entries(user, groups)
        else:
            stored, tiers_set = self.store.limits.read(user, groups)
        return self.configured.merged(stored, tiers_set)

    def _efficiency(self, user: str) -> float | None:
        if self.efficiency is None:
            return None
        now = time.monotonic()
        with self._lock:
            cached = self._scores.get(user)
        if cached is not None and cached[0] > now:
            return cached[1]
        value = self.efficiency(user)
        with self._lock:
            self._scores[user] = (now + self.cache_seconds, value)
        return value

    def effective(self, who: Identity, table: LimitTable | None = None) -> Effective:
        """The limits for `who`, with tiers applied to their efficiency."""
        table = table if table is not None else self.table()
        found = table.resolve(who)
        if table.tiers and any(found.limits.get(t.limit) is not None for t in table.tiers):
            found = apply_tiers(found, table.tiers, self._efficiency(who.name), self.window)
        return found

    # --- the guard ------------------------------------------------------------------------

    def guard(self, who: Identity) -> Guard | None:
        """The check a booking by `who` passes in its transaction: the limits (admins are
        exempt) and the budgets of its owner (bookings/budgets.py; None: nothing to check)."""
        limits = None if who.is_admin else self._limits_guard(who)
        budgets = self.budgets
        if budgets is None:
            return limits

        def check(reads: LimitReads, booking: PendingWrite) -> None:
            if limits is not None:
                limits(reads, booking)
            owner = who if booking.owner == who.name else self.identity_of(booking.owner)
            budgets.check(reads, booking, owner)

        return check

    def _limits_guard(self, who: Identity) -> Guard:

        def check_limits(reads: LimitReads, booking: PendingWrite) -> None:
            if not grows(booking):
                return  # shorter, renamed, or on other GPUs of the same number
            owner = who if booking.owner == who.name else self.identity_of(booking.owner)
            self._site_limits(reads, booking, owner)
            if self.on_groups is not None:
                self.on_groups(reads, booking, owner)

        return check_limits

    def _site_limits(self, reads: LimitReads, booking: PendingWrite, owner: Identity) -> None:
        """The site's limits (configured and stored) of the booking's owner."""
        old = booking.old
        table = self.table(owner, reads)
        if table.empty:
            return
        effective = self.effective(owner, table)
        if effective.limits.empty:
            return
        now = self.now()
        reads.lock_owner(owner.name)  # before reading what they hold
        held = reads.holdings(
            owner.name, booking.start - WEEK, booking.end + WEEK, now,
            merged=True, exclude=old.id if old else None,
        )  # fmt: skip
        count = 0
        if old is None and effective.limits.upcoming is not None:
            count = reads.upcoming(owner.name, now)
        # a share counts its part: a quarter GPU for 4 h is 1 GPU-hour
        held_gpus = len(booking.gpu_ids) * fraction(booking.share)
        proposal = Proposal(booking.start, booking.end, held_gpus)
        check(effective, proposal, held, now, self.zone, new=old is None, upcoming_now=count)

    # --- flags (a limit lowered below what someone holds) -----------------------------------

    def flags(self, live: Sequence[Reservation]) -> dict[int, str]:
        """Why each of `live` is over its owner's limits, the site's or a host group's (only
        those that are)."""
        found: dict[int, str] = {}
        if self.on_groups is not None:
            found.update(self.on_groups.flags(self.store, live, self.identity_of))
        table = self.table()
        if table.empty:
            return found
        now = self.now()
        for owner in sorted({r.owner for r in live}):
            who = self.identity_of(owner)
            if who.is_admin:
                continue  # admins may exceed limits
            effective = self.effective(who, table)
            if effective.limits.empty:
                continue
            held = self.store.limits.holdings(owner, now - WEEK, FOREVER, now)
            found.update(over_limits(effective, held, now, self.zone))
        return found

    # --- what a user holds now --------------------------------------------------------------

    def figures(self, who: Identity) -> dict[str, Any]:
        """`who`'s limits, where they come from, and the current figures against them."""
        effective = self.effective(who)
        now = self.now()
        held, count = self.store.limits.standing(who.name, now - WEEK, now + WEEK, now)
        held_now, _, _ = peak(held, now, now + SECOND)
        _, week_hours, _ = worst_week(held, Proposal(now, now + SECOND, 0))
        return {
            **effective.to_json(),
            "user": who.name,
            "exempt": who.is_admin,
            "current": {
                "gpus": held_now,
                "gpu_hours_week": round(week_hours, 2),
                "upcoming": count,
            },
        }

    # --- admin changes ----------------------------------------------------------------------

    def set(self, who: Identity, scope: str, name: str, limits: Limits) -> Limits:
        """Store one scope's limits (admins); None leaves a limit to the next level."""
        _admin(who)
        scope, name = _scope(scope, name)
        self.store.limits.put(scope, name, limits.to_json(), who.name, self.now())
        return limits

    def remove(self, who: Identity, scope: str, name: str) -> None:
        """Forget one scope's stored limits (configured ones apply again)."""
        _admin(who)
        scope, name = _scope(scope, name)
        if not self.store.limits.remove(scope, name):
            shown = f"{scope} {name}" if name else scope
            raise NotFound(f"No limits are stored for the {shown}.")

    def set_tiers(self, who: Identity, tiers: tuple[Tier, ...]) -> tuple[Tier, ...]:
        """Replace the stored tiers (admins); none turns the configured ones off."""
        _admin(who)
        self.store.limits.put("tiers", "", [t.to_json() for t in tiers], who.name, self.now())
        with self._lock:
            self._scores.clear()
        return tiers


def _admin(who: Identity) -> None:
    if not who.is_admin:
        raise Forbidden(f"Only gpuhive admins may change limits; {who.name} is not one.")


def _scope(scope: str | None, name: str | None) -> tuple[str, str]:
    if scope == "default":
        return scope, ""
    if scope not in ("group", "user"):
        raise Invalid(f"'scope' must be default, group or user, not {scope!r}.")
    if not isinstance(name, str) or not name.strip() or len(name) > 128:
        raise Invalid(f"A {scope} limit needs the {scope}'s 'name' (at most 128 characters).")
    return scope, name.strip()
