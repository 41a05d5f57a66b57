"""Bookings: the facade the API calls for reservations, access rules, coverage and usage.

It is the one writer of reservation state: users' and admins' edits, protection ending a
reservation (`end`), a kernel end policy's extension (`update` with a reason) and flags set
by limit, access-rule or MIG changes (`reflag`) all come through here, so the events follow
(webhooks, calendar SEQUENCE, availability subscriptions) say who changed it and why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, Protocol

from ..errors import Invalid
from ..model import Gpu, Identity, Reservation, units_conflict
from ..model.approvals import APPROVED, EXPIRED
from ..model.authority import RESERVATIONS, RULES, WRITE
from ..model.errand import Errand
from ..model.finder import Slot, Want
from ..model.requests import Booking, BookingChange
from ..privacy import Privacy
from ..store import Store
from ..store.preemption import LendingShown
from . import access
from .approvals import SYSTEM as RELEASER
from .approvals import ApprovalDecisions
from .finder import SlotSearch, Vendors
from .overview import occupancy
from .quotas import LimitService
from .reservations import Policy, ReservationService
from .usage import usage_report

MAX_LIST = 10_000

Run = Callable[..., Awaitable[Any]]
Violations = Callable[[int, Identity], Awaitable[list[dict[str, Any]]]]
# (kind, reservation, by whom, why): kind 'created', 'changed' or 'cancelled'
Changed = Callable[[str, Reservation, str, "str | None"], Any]
# (kind, reservation, by whom, note, approvers): kind 'tentative', 'approved', 'declined',
# 'expired' (integrations/approvals.py tells the people concerned)
Told = Callable[[str, Reservation, str, "str | None", list[str]], Any]


class Tellers(Protocol):
    """Who tells about approvals (integrations.Integrations), and its leader's ticker."""

    ticks: list[Callable[[datetime], Awaitable[Any]]]

    def approval_event(
        self, kind: str, res: Reservation, by: str, note: str | None, approvers: list[str]
    ) -> None: ...

    def budget_warning(self, standing: Any, threshold: float, people: list[str]) -> None: ...


PROTECTION = "protection"  # who protection's ends are by
SYSTEM = "gpuhive"  # who changes nobody asked for are by (a MIG re-partition)
RULES_CHANGED = "access rules changed"
MIG_CHANGED = "MIG slices re-partitioned"
LENDING_STOPPED = "lends its GPUs no more"


class Bookings:
    """Reservations and the rules that govern them, as a requester may see and change them."""

    def __init__(
        self,
        store: Store,
        run: Run,
        policy: Policy,
        identity_of: Callable[[str], Identity],
        privacy: Privacy,
        *,
        limits: LimitService,
        remember: Callable[[Identity, Errand | None], Awaitable[None]],
        changed: Changed = lambda _kind, _res, _by, _why: None,
        unix_user: Callable[[str], str] = lambda name: name,
        violations: Violations | None = None,
        told: Tellers | None = None,
    ) -> None:
        self.store = store
        self.run = run
        self.policy = policy
        self.privacy = privacy
        self.authority = policy.authority  # who may (model/authority.py)
        self.reservations = ReservationService(store, policy, identity_of, limits=limits)
        self._remember = remember
        self._changed = changed
        self._unix_user = unix_user
        self._violations = violations
        self.slots = SlotSearch(store, policy, lambda: self.reservations.limits)
        self.approvals = ApprovalDecisions(store, self.authority, self.reservations.now)
        self.told: Told = lambda _kind, _res, _by, _note, _approvers: None
        if told is not None:  # the approvers and holders are told; holds end on its ticks
            self.told = told.approval_event
            told.ticks.append(self.release_unanswered)
            if limits.budgets is not None:  # budgets warn once per threshold and period
                limits.budgets.warn = told.budget_warning
                told.ticks.append(limits.budgets.tick)

    # --- reservations ------------------------------------------------------------------

    def gpus_matching(self, host: str | None, gpu: str | None) -> list[Gpu]:
        """GPUs filtered by host name and/or GPU name; unknown names are refused."""
        inventory = self.store.inventory
        if gpu:
            found = inventory.gpu(gpu)
            if found is None:
                raise Invalid(f"Unknown GPU '{gpu}'.")
            return [found]
        if host:
            found_host = inventory.host(host)
            if found_host is None:
                raise Invalid(f"Unknown host '{host}'.")
            return list(found_host.gpus)
        return inventory.gpus()

    async def find(self, start: datetime, end: datetime, **filters: Any) -> list[Reservation]:
        """Reservations overlapping [start, end); `filters` as `_window` takes them (host,
        GPU, owner, cancelled ones too, limit)."""
        window = self._window(start, end, **filters)
        found: list[Reservation] = await self.run(self.store.reservations.window, **window)
        return found

    async def find_shown(
        self, start: datetime, end: datetime, **filters: Any
    ) -> tuple[list[Reservation], LendingShown]:
        """`find`, and each one's lending (choice, the jobs its loans run), in one read."""
        window = self._window(start, end, **filters)
        shown: tuple[list[Reservation], LendingShown] = await self.run(
            self.store.reservations.window_shown, **window
        )
        return shown

    async def lending_shown(self, reservation_ids: list[int]) -> LendingShown:
        """Each reservation's lending choice and the jobs its loans run now."""
        shown: LendingShown = await self.run(self.store.preemption.shown, reservation_ids)
        return shown

    def _window(
        self,
        start: datetime,
        end: datetime,
        *,
        host: str | None = None,
        gpu: str | None = None,
        user: str | None = None,
        include_cancelled: bool = False,
        limit: int = 1000,
    ) -> dict[str, Any]:
        """The store's window arguments of a search, checked (Invalid)."""
        if end <= start:
            raise Invalid("The end of the window must be after its start.")
        if not 0 < limit <= MAX_LIST:
            raise Invalid(f"'limit' must be between 1 and {MAX_LIST}.")
        gpu_ids = None
        if host or gpu:  # a GPU's reservations include those of its MIG slices, and the reverse
            chosen = self.gpus_matching(host, gpu)
            devices = {g.device_id for g in chosen}
            related = [u for u in self.store.inventory.units() if u.device_id in devices]
            gpu_ids = [u.id for u in chosen] + [
                u.id for u in related if any(units_conflict(u, c) for c in chosen)
            ]
        return {
            "start": start,
            "end": end,
            "gpu_ids": gpu_ids,
            "owner": user,
            "include_cancelled": include_cancelled,
            "limit": limit,
        }

    async def search(
        self, who: Identity, want: Want, vendors: Vendors | None = None
    ) -> tuple[Want, list[Slot]]:
        """The earliest slots that fit `want` for `who` (bookings.finder; `vendors`: the
        hosts' GPU vendors, for a `want` that names one)."""
        found: tuple[Want, list[Slot]] = await self.run(self.slots.search, who, want, vendors)
        return found

    async def get(self, reservation_id: int) -> Reservation:
        """One reservation (404 when there is none)."""
        found: Reservation = await self.run(self.store.reservations.get, reservation_id)
        return found

    async def create(
        self, who: Identity, booking: Booking, errand: Errand | None = None
    ) -> Reservation:
        """Book GPUs for `who` (or, for admins, for the owner the booking names); `errand`:
        the API request it is part of (its key is taken in the booking's transaction)."""
        await self._remember(who, errand)
        async with self._serial():
            made: Reservation = await self.run(self.reservations.create, who, booking, errand)
            await self._mirror(who, made)
        self._changed("created", made, who.name, None)
        await self._ask(made, who.name)
        return made

    @asynccontextmanager
    async def _serial(self) -> AsyncIterator[None]:
        """One booking change at a time where a subclass needs it (here: nothing to wait for)."""
        yield

    async def _mirror(self, who: Identity, made: Reservation) -> None:
        """Hold a new booking elsewhere too, where a subclass does (here: nowhere)."""

    async def update(
        self,
        who: Identity,
        reservation_id: int,
        change: BookingChange,
        reason: str | None = None,
        errand: Errand | None = None,
    ) -> Reservation:
        """Change a reservation's title, description, span or GPUs (`reason`: why, if not
        asked; `errand`: the API request it is part of)."""
        changed: Reservation = await self.run(
            self.reservations.update, who, reservation_id, change, errand
        )
        self._changed("changed", changed, who.name, reason)
        await self._ask(changed, who.name)
        return changed

    async def stop_lending(self, reservation_id: int, by: str, reason: str) -> Reservation:
        """The reservation lends its GPUs no more (the holder took them back); a change by
        `by` for `reason`. Its early-reclaim choice stays."""
        await self.run(self.store.preemption.set_lending, reservation_id, False, None)
        res = await self.get(reservation_id)
        self._changed("changed", res, by, f"{LENDING_STOPPED}: {reason}")
        return res

    async def cancel(
        self, who: Identity, reservation_id: int, errand: Errand | None = None
    ) -> Reservation:
        """Cancel a reservation (a running one ends now; `errand`: the API request)."""
        done: Reservation = await self.run(self.reservations.cancel, who, reservation_id, errand)
        self._changed("cancelled", done, who.name, None)
        return done

    async def end(self, reservation_id: int, by: str, reason: str) -> Reservation | None:
        """End a running reservation now, for `reason` (e.g. 'released: no-show'); None when
        it was not running any more (nothing changed)."""
        ended: Reservation | None = await self.run(self.reservations.end_now, reservation_id)
        if ended is not None:
            self._changed("changed", ended, by, reason)
        return ended

    # --- approvals (bookings/approvals.py) ------------------------------------------------

    async def answer(
        self, who: Identity, reservation_id: int, outcome: str, note: str | None = None
    ) -> Reservation:
        """Approve a tentative booking (confirmed) or decline it (cancelled); its holder is
        told. Only its hosts' group administrators and site admins may (403 says who)."""
        done: Reservation = await self.run(
            self.approvals.answer, who, reservation_id, outcome, note
        )
        said = outcome + (f": {note}" if note else "")
        self._changed("changed" if outcome == APPROVED else "cancelled", done, who.name, said)
        self.told(outcome, done, who.name, note, [])
        return done

    async def release_unanswered(self, now: datetime) -> list[Reservation]:
        """Release the tentative bookings whose hold ended by `now` unanswered; their
        holders are told (the leader's ticker calls it)."""
        released = []
        for rid in await self.run(self.approvals.due, now):
            done: Reservation | None = await self.run(self.approvals.release, rid, now)
            if done is not None:
                released.append(done)
                self._changed("cancelled", done, RELEASER, "released: not approved in time")
                self.told(EXPIRED, done, RELEASER, None, [])
        return released

    async def _ask(self, res: Reservation, by: str) -> None:
        """A booking that waits for approval: its approvers are told."""
        if res.tentative:
            known: dict[str, list[str]] = await self.run(self.store.users.all)
            self.told("tentative", res, by, None, self.approvals.approvers(res, known))

    async def repartitioned(self) -> dict[int, str | None]:
        """MIG slices were re-partitioned: re-check every live reservation's flag."""
        return await self.reflag(SYSTEM, MIG_CHANGED)

    async def reflag(self, by: str, reason: str) -> dict[int, str | None]:
        """Re-check every live reservation's flag after `reason` (limits or access rules
        changed, a MIG re-partition); each one whose flag changed is a change by `by`."""
        flags: dict[int, str | None] = await self.run(self.reservations.reflag)
        for rid, flag in flags.items():
            res = await self.get(rid)
            self._changed("changed", res, by, f"{'flagged' if flag else 'flag cleared'}: {reason}")
        return flags

    async def overview(
        self,
        who: Identity,
        start: datetime,
        end: datetime,
        slot: timedelta,
        host: str | None = None,
        gpu: str | None = None,
    ) -> dict[str, Any]:
        """Per GPU (and MIG slice) and slot of [start, end): free, booked (by whom)."""
        inventory = self.store.inventory
        chosen = self.gpus_matching(host, gpu)
        gpus = [u for g in chosen for u in (g, *([] if g.is_slice else inventory.slices_of(g)))]
        if end <= start:
            raise Invalid("The end of the window must be after its start.")
        devices = {g.device_id for g in gpus}
        related = [u.id for u in inventory.units() if u.device_id in devices]
        ids = {g.id for g in gpus} | set(related) | devices
        found = await self.run(self.store.reservations.window, start, end, gpu_ids=sorted(ids))
        return occupancy(found, gpus, start, end, slot, who)

    # --- access rules ------------------------------------------------------------------

    async def rules_for(self, who: Identity) -> list[access.Rule]:
        """All rules for admins; for everyone else the rules that apply to them, and those
        on hosts they administer (model/authority.py)."""
        rules: list[access.Rule] = await self.run(self.store.rules.all)
        if who.is_admin:
            return rules
        mine = who.admin_hosts
        return [r for r in rules if r.applies_to(who) or (mine and self.rule_hosts(r) <= mine)]

    def hosts_of(self, refs: list[str]) -> frozenset[str]:
        """The hosts of these GPUs or slices (a name nothing has: none)."""
        found = (self.store.inventory.gpu(ref.strip()) for ref in refs)
        return frozenset(g.host for g in found if g is not None)

    def rule_hosts(self, rule: access.Rule) -> frozenset[str]:
        """The hosts a rule's resources are on (a rule naming none: every host)."""
        inventory = self.store.inventory
        if not rule.hosts and not rule.gpus:
            return frozenset(h.name for h in inventory.hosts())
        found = (inventory.gpu(g) for g in rule.gpus)
        return frozenset(rule.hosts) | {g.host for g in found if g is not None}

    def may_change_rules(self, who: Identity, *rules: access.Rule) -> None:
        """Refuse (403) a change of these rules to all but admins and the administrators of
        every host they name (who may instead, in the refusal)."""
        hosts = frozenset().union(*(self.rule_hosts(r) for r in rules))
        every = not all(r.hosts or r.gpus for r in rules)
        thing = "a rule for every host" if every else "a rule for " + ", ".join(sorted(hosts))
        self.authority.require(who, RULES, WRITE, hosts=hosts, thing=thing)

    def _known_resources(self, rule: access.Rule) -> None:
        for host in rule.hosts:
            if self.store.inventory.host(host) is None:
                raise Invalid(f"The rule names an unknown host '{host}'.")
        for gpu in rule.gpus:
            if self.store.inventory.gpu(gpu) is None:
                raise Invalid(f"The rule names an unknown GPU '{gpu}'.")

    async def add_rule(
        self, who: Identity, rule: access.Rule, errand: Errand | None = None
    ) -> tuple[access.Rule, dict[int, Any]]:
        """Add an access rule; with the reservations whose flags changed (`errand`: the API
        request it is part of, handed to the rule's transaction)."""
        self._known_resources(rule)
        self.may_change_rules(who, rule)
        saved = await self.run(self.store.rules.add, rule, who.name, errand)
        return saved, await self.reflag(who.name, RULES_CHANGED)

    async def replace_rule(
        self, who: Identity, rule_id: int, rule: access.Rule
    ) -> tuple[access.Rule, dict[int, Any]]:
        """Replace an access rule; with the reservations whose flags changed."""
        self._known_resources(rule)
        self.may_change_rules(who, rule, *await self._stored_rule(rule_id))
        saved = await self.run(self.store.rules.replace, rule_id, rule)
        return saved, await self.reflag(who.name, RULES_CHANGED)

    async def delete_rule(self, who: Identity, rule_id: int) -> dict[int, Any]:
        """Delete an access rule; the reservations whose flags changed."""
        self.may_change_rules(who, *await self._stored_rule(rule_id))
        await self.run(self.store.rules.remove, rule_id)
        flags: dict[int, Any] = await self.reflag(who.name, RULES_CHANGED)
        return flags

    async def _stored_rule(self, rule_id: int) -> list[access.Rule]:
        """The stored rule of this id, if there is one (the store says 404 otherwise)."""
        rules: list[access.Rule] = await self.run(self.store.rules.all)
        return [r for r in rules if r.id == rule_id]

    async def coverage(
        self, who: Identity, start: datetime, end: datetime, host: str | None, gpu: str | None
    ) -> dict[str, Any]:
        """Per GPU, the spans of [start, end) in which `who` may book (for the calendar)."""
        if end <= start or end - start > timedelta(days=62):
            raise Invalid("The window must end after it starts and span at most 62 days.")
        gpus = self.gpus_matching(host, gpu)
        rules = await self.run(self.store.rules.all)
        unrestricted = not rules or who.is_admin
        zone = self.policy.zone
        spans = {
            g.ref: [
                [a.isoformat(), b.isoformat()]
                for a, b in (
                    [(start, end)]
                    if unrestricted
                    else access.allowed_spans(rules, who, g, start, end, zone)
                )
            ]
            for g in gpus
        }
        return {"unrestricted": unrestricted, "timezone": str(zone), "gpus": spans}

    # --- usage -------------------------------------------------------------------------

    async def reservation_usage(self, who: Identity, reservation_id: int) -> dict[str, Any]:
        """A reservation's usage and violations; for its owner and admins (or all, if public)."""
        res = await self.get(reservation_id)
        if not self.privacy.public_usage:  # its owner, its hosts' administrators, admins
            self.authority.require(
                who, RESERVATIONS, "see usage", owner=res.owner,
                hosts={g.host for g in res.gpus},
                thing=f"reservation {reservation_id} belongs to {res.owner}",
            )  # fmt: skip
        usage: dict[str, Any] = await self.run(self.store.usage.for_reservation, res)
        usage["violations"] = (
            await self._violations(reservation_id, who) if self._violations else []
        )
        return usage

    async def usage(self, who: Identity, start: datetime, end: datetime) -> dict[str, Any]:
        """Reserved and used GPU-hours per user, per GPU and per reservation in a window.

        Per GPU and in total for everyone; per user and per reservation only one's own rows,
        unless `who` is an admin or usage is public.
        """
        if end <= start or end - start > timedelta(days=400):
            raise Invalid("The window must end after it starts and span at most 400 days.")
        measured = await self.run(self.store.usage.window, start, end)
        found = await self.run(self.store.reservations.window, start, end, limit=MAX_LIST)
        per_res = await self.run(self.store.usage.by_reservation, [r.id for r in found])
        sees_all = who.is_admin or self.privacy.public_usage
        return usage_report(
            start,
            end,
            found,
            measured,
            per_res,
            lambda gpu_id: self.store.inventory.gpu_by_id(gpu_id).ref,
            owner=None if sees_all else who.name,
            users={who.name, self._unix_user(who.name)},  # booked as, ran as
        )
