"""Booking policy: who may reserve, edit and cancel what, for how long, and when."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo

from ..errors import Conflict, Forbidden, Invalid
from ..model import Gpu, Identity, Reservation, describe_duration, describe_instant
from ..model import utcnow as _utcnow
from ..model.approvals import ApprovalRules
from ..model.authority import RESERVATIONS, Authority, sees_hosts
from ..model.errand import Errand
from ..model.requests import Booking, BookingChange
from ..model.rules import Rule
from ..store import Changes, Store
from ..store.limits import LimitReads
from ..store.reservations import PendingWrite
from . import access
from .quotas import LimitService
from .shares import requested_share

TITLE_MAX = 200
DESCRIPTION_MAX = 4000


class _NotRunning(Exception):
    """The reservation protection would end is not running (any more)."""


def unknown_unit(name: str) -> str:
    """The 422 message for a name that is no GPU or slice of the inventory."""
    if "/" in name:
        return (
            f"Unknown MIG slice '{name}'. Name slices as 'host:index/migGI' (e.g. 'gpu1:0/mig5') "
            "or by MIG UUID; %gpustatus and the sidebar list each GPU's slices (a re-partition "
            "may have removed this one)."
        )
    return (
        f"Unknown GPU '{name}'. Name GPUs as 'host:index' (e.g. 'gpu1:0') "
        "or by UUID; %gpustatus and the sidebar list them."
    )


@dataclass(frozen=True)
class Policy:
    """Site limits on bookings (all configurable), and who administers (model/authority.py)."""

    zone: tzinfo
    min_length: timedelta = timedelta(minutes=5)
    max_length: timedelta = timedelta(days=7)
    horizon: timedelta = timedelta(days=90)
    past_grace: timedelta = timedelta(minutes=5)
    authority: Authority = field(default_factory=Authority, compare=False)
    approvals: ApprovalRules = field(default_factory=ApprovalRules, compare=False)


class ReservationService:
    """The rules of booking, on top of the store. All methods are synchronous."""

    def __init__(
        self,
        store: Store,
        policy: Policy,
        identity_of: Callable[[str], Identity],
        *,
        limits: LimitService,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if limits is None:  # unwired, no booking would be checked
            raise TypeError(
                "ReservationService needs the fair-share limits (bookings.quotas.LimitService, "
                f"FairShare.limits), not {limits!r}: without them no booking is checked."
            )
        self.store = store
        self.policy = policy
        self.identity_of = identity_of
        self.now = clock
        self.limits = limits  # fair-share limits, checked in each booking's transaction
        self.authority = policy.authority  # who may (model/authority.py)

    # --- helpers -------------------------------------------------------------------

    def resolve_gpus(self, names: Sequence[str]) -> list[Gpu]:
        """GPUs ('host:index' or UUID) and MIG slices ('host:index/migGI' or MIG UUID);
        unknown names, and a GPU named with one of its own slices, are refused."""
        if not names:
            raise Invalid('\'gpus\' must be a non-empty list such as ["gpu1:0", "gpu1:1"].')
        found: dict[int, Gpu] = {}
        for item in names:
            gpu = self.store.inventory.gpu(item.strip())
            if gpu is None:
                raise Invalid(unknown_unit(item))
            found[gpu.id] = gpu
        units = list(found.values())
        for part in units:
            if part.is_slice and part.parent_id in found:
                raise Invalid(
                    f"{part.ref} is a slice of {part.parent_ref}, which is also requested: "
                    "booking the whole GPU already holds all of its slices."
                )
        return units

    def check_bookable(self, units: Sequence[Gpu]) -> None:
        """Conflict (409) naming the reason when a unit (or a slice's GPU) failed its health
        check or is drained for maintenance."""
        closed = self.store.health.unbookable()
        for unit in units:
            found = closed.get(unit.id) or (closed.get(unit.parent_id) if unit.parent_id else None)
            if found is not None:
                raise Conflict(found.why_not(unit.ref), gpus=[unit.ref], health=found.to_json())

    def _check_span(self, start: datetime, end: datetime, now: datetime, new_start: bool) -> None:
        p = self.policy
        if end <= start:
            raise Invalid("The end must be after the start.")
        if new_start and start < now - p.past_grace:
            raise Invalid("The start is in the past; reservations can only start from now on.")
        length = end - start
        if new_start and length < p.min_length:
            raise Invalid(
                f"A reservation must last at least {describe_duration(p.min_length)}; "
                f"this one lasts {describe_duration(length)}."
            )
        if length > p.max_length:
            raise Invalid(
                f"A reservation may last at most {describe_duration(p.max_length)}; "
                f"this one lasts {describe_duration(length)}."
            )
        if start > now + p.horizon:
            raise Invalid(f"Reservations can be made at most {describe_duration(p.horizon)} ahead.")

    def _check_access(
        self,
        who: Identity,
        gpus: Sequence[Gpu],
        start: datetime,
        end: datetime,
        rules: list[Rule] | None = None,
    ) -> None:
        """Forbidden unless the access rules (`rules`, else read now) let `who` use `gpus`
        over [start, end)."""
        if rules is None:
            rules = self.store.rules.all()
        problems = access.uncovered(rules, who, gpus, start, end, self.policy.zone)
        if problems:
            gpu, (gap_start, gap_end) = problems[0]
            zone = self.policy.zone
            begin, until = describe_instant(gap_start, zone), describe_instant(gap_end, zone)
            raise Forbidden(
                f"{who.name} may not use {gpu.ref} from {begin} to {until} ({zone}): "
                "no access rule allows it.",
                gpus=[g.ref for g, _ in problems],
            )

    @staticmethod
    def _span(end: datetime | None, duration: timedelta | None, start: datetime) -> datetime:
        if end is not None and duration is not None:
            raise Invalid("Give either 'end' or 'duration', not both.")
        if duration is not None:
            return start + duration
        if end is None:
            raise Invalid("'end' (or 'duration') is required.")
        return end

    def _may_edit(self, who: Identity, reservation: Reservation, verb: str) -> None:
        """Its owner and admins may change it; the administrators of its hosts may also
        cancel or end it, and choose its lending (model/authority.py)."""
        self.authority.require(
            who, RESERVATIONS, verb if verb in ("cancel", "lending") else "change",
            owner=reservation.owner, hosts={g.host for g in reservation.gpus},
            thing=f"reservation {reservation.id} belongs to {reservation.owner}",
        )  # fmt: skip

    # --- commands ------------------------------------------------------------------

    def create(self, who: Identity, booking: Booking, errand: Errand | None = None) -> Reservation:
        """Book GPUs; raises Invalid/Forbidden/Conflict with a reason (`errand`: the API
        request it is part of, handed to the booking's transaction)."""
        now = self.now()
        title, description = booking.title, booking.description
        gpus = self.resolve_gpus(booking.gpus)
        self.check_bookable(gpus)
        start = booking.start or now
        end = self._span(booking.end, booking.duration, start)
        owner = who
        if booking.owner not in (None, who.name):
            self.authority.require(who, RESERVATIONS, "for another")
            owner = self.identity_of(booking.owner)
        self._check_span(start, end, now, new_start=True)
        limits = self.limits.guard(who)

        def guard(reads: LimitReads, pending: PendingWrite) -> None:
            # The rules are read in the booking's own transaction: one round trip less, and
            # the check sees the rules that hold when the booking is written.
            self._check_access(owner, gpus, start, end, reads.access_rules())
            if limits is not None:  # None: admins are exempt
                limits(reads, pending)

        lending = (booking.lend, booking.reclaim_before_start)
        share = requested_share(gpus, booking.share, booking.memory_mib)
        trial = Reservation(0, owner.name, title, description, start, end, tuple(gpus), now,
                            share_ppm=share)  # fmt: skip
        return self.store.reservations.create(
            owner.name, title, description, start, end, [g.id for g in gpus], guard, lending,
            errand, share, self.tentative(who, trial, now),
        )  # fmt: skip

    def tentative(
        self, who: Identity, res: Reservation, now: datetime
    ) -> tuple[datetime, str] | None:
        """Until when and why `res` (as `who` would book it) waits for approval; None: it
        needs none (under every threshold, or `who` administers all of its hosts)."""
        rules = self.policy.approvals
        if not rules.thresholds or sees_hosts(who, {g.host for g in res.gpus}):
            return None
        needed = rules.needed(res, self._group_name)
        return None if needed is None else (now + rules.hold, needed[0])

    def _group_name(self, host: str) -> str | None:
        group = self.authority.host_group(host)
        return None if group is None else group.name

    def update(
        self,
        who: Identity,
        reservation_id: int,
        change: BookingChange,
        errand: Errand | None = None,
    ) -> Reservation:
        """Edit title, description, times or GPUs (one unit); started ones only their end."""
        new_gpus = self.resolve_gpus(change.gpus) if change.gpus is not None else None
        if new_gpus is not None:
            self.check_bookable(new_gpus)
        new_start = change.start
        rules_needed = new_gpus is not None or new_start is not None or change.moves_end
        new_share = change.share is not None or change.memory_mib is not None

        def decide(old: Reservation) -> Changes:
            now = self.now()
            self._may_edit(who, old, "lending" if change.only_lending else "change")
            if old.cancelled:
                raise Conflict(f"Reservation {old.id} was cancelled; it cannot be changed.")
            if old.end <= now:
                raise Conflict(f"Reservation {old.id} has already ended; it cannot be changed.")
            started = old.start <= now
            start = new_start or old.start
            end = self._span(change.end, change.duration, start) if change.moves_end else old.end
            gpus = new_gpus if new_gpus is not None else list(old.gpus)
            if started:
                if new_start is not None and new_start != old.start:
                    raise Invalid(
                        f"Reservation {old.id} has already begun; its start cannot move. "
                        "You can still end it early or extend it."
                    )
                if new_gpus is not None and {g.id for g in new_gpus} != {g.id for g in old.gpus}:
                    raise Invalid(
                        f"Reservation {old.id} has already begun; its GPUs cannot change."
                    )
                if end < now - self.policy.past_grace:
                    raise Invalid("A running reservation cannot be moved into the past.")
                end = max(end, now)
                if end <= start:
                    raise Invalid("The end must be after the start.")
                self._check_span(start, end, now, new_start=False)
            else:
                self._check_span(start, end, now, new_start=True)
            if rules_needed and (end > old.end or start < old.start or new_gpus is not None):
                self._check_access(self.identity_of(old.owner), gpus, start, end)
            if new_share:
                share = requested_share(gpus, change.share, change.memory_mib)
            else:  # the share it holds, of its (new) GPU
                share = old.share_ppm
                if old.is_share and new_gpus is not None:
                    requested_share(gpus, share, None)
            grows = start < old.start or end > old.end or len(gpus) > len(old.gpus)
            trial = replace(old, start=start, end=end, gpus=tuple(gpus), share_ppm=share)
            again = None  # a confirmed booking grown past a threshold waits for approval again
            if not old.tentative and (grows or share > old.share_ppm):
                again = self.tentative(who, trial, now)
            return Changes(
                title=change.title,
                description=change.description,
                start=start,
                end=end,
                gpu_ids=tuple(g.id for g in gpus),
                lend=change.lend,
                reclaim_before_start=change.reclaim_before_start,
                share=share,
                tentative=again,
            )

        guard = self.limits.guard(who)
        return self.store.reservations.modify(reservation_id, decide, guard, errand)

    def cancel(
        self, who: Identity, reservation_id: int, errand: Errand | None = None
    ) -> Reservation:
        """Cancel an upcoming reservation, or end a running one now."""

        def decide(old: Reservation) -> Changes:
            now = self.now()
            self._may_edit(who, old, "cancel")
            if old.cancelled:
                raise Conflict(f"Reservation {old.id} is already cancelled.")
            if old.end <= now:
                raise Conflict(f"Reservation {old.id} has already ended.")
            if old.start <= now:
                return Changes(end=max(now, old.start + timedelta(microseconds=1)))
            return Changes(cancelled_at=now)

        return self.store.reservations.modify(reservation_id, decide, errand=errand)

    def end_now(self, reservation_id: int) -> Reservation | None:
        """End a running reservation now (no owner's permission: protection's call); None
        when it is not running (cancelled, not begun or already over): nothing is written."""

        def decide(old: Reservation) -> Changes:
            now = self.now()
            if old.cancelled or not old.start < now < old.end:
                raise _NotRunning  # rolls the transaction back
            return Changes(end=now)

        try:
            return self.store.reservations.modify(reservation_id, decide)
        except _NotRunning:
            return None

    def reflag(self) -> dict[int, str | None]:
        """Flag future reservations no rule allows any more, or on MIG slices a re-partition
        removed; clear flags that became fine."""
        now = self.now()
        rules = self.store.rules.all()
        live = self.store.reservations.window(now, now + self.policy.horizon * 2)
        changes: dict[int, str | None] = {}
        owners: dict[str, Identity] = {}
        over = self.limits.flags(live)
        for res in live:
            start = max(res.start, now)
            owner = owners.get(res.owner) or owners.setdefault(
                res.owner, self.identity_of(res.owner)
            )
            problems = access.uncovered(rules, owner, res.gpus, start, res.end, self.policy.zone)
            reason = None
            if problems:
                refs = ", ".join(g.ref for g, _ in problems)
                reason = f"The access rules no longer allow {res.owner} to use {refs} then."
            gone = [g for g in res.gpus if self.store.inventory.removed(g)]
            if gone:
                refs = ", ".join(f"{g.ref} ({g.profile})" for g in gone)
                reason = (
                    f"The MIG slice {refs} no longer exists: an admin re-partitioned "
                    f"{gone[0].parent_ref}. Book another slice or the whole GPU."
                )
            reason = reason or over.get(res.id)
            if reason != res.flag_reason or bool(reason) != res.flagged:
                changes[res.id] = reason
        self.store.reservations.set_flags(changes)
        return changes
