"""Approvals' decisions (issue #46, item 4): approve, decline, and release a tentative booking
whose hold ran out, each in the reservation's own transaction.

Which bookings wait (the thresholds) is model/approvals.py; the booking is made tentative by
`ReservationService.create` (or `update`, when an edit grows it past a threshold). Who may
answer is the policy's ("gpuhive:reservations", "approve"): the administrators of the
booking's hosts' group, and site admins.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..errors import Conflict, Invalid
from ..model import Identity, Reservation
from ..model.approvals import APPROVED, DECLINED, EXPIRED
from ..model.authority import RESERVATIONS, Authority
from ..store import Changes, Store
from ..store.approvals import Decision

NOTE_MAX = 1000
SYSTEM = "gpuhive"  # who releases a booking left unanswered


class _NotDue(Exception):
    """The booking is no longer tentative, or its hold has not ended (nothing to release)."""


class ApprovalDecisions:
    """Answers to tentative bookings, through the store's one reservation writer."""

    def __init__(self, store: Store, authority: Authority, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.authority = authority
        self.now = clock

    def answer(
        self, who: Identity, reservation_id: int, outcome: str, note: str | None
    ) -> Reservation:
        """Approve (the booking is confirmed) or decline (it is cancelled, its slot free)."""
        if outcome not in (APPROVED, DECLINED):
            raise Invalid(f"An answer is {APPROVED} or {DECLINED}, not {outcome!r}.")
        if note is not None and len(note) > NOTE_MAX:
            raise Invalid(f"'reason' may be at most {NOTE_MAX} characters.")

        def decide(old: Reservation) -> Changes:
            now = self.now()
            hosts = {g.host for g in old.gpus}
            self.authority.require(
                who, RESERVATIONS, "approve", hosts=hosts,
                thing=f"reservation {old.id} ({old.owner}'s) is on {', '.join(sorted(hosts))}",
            )  # fmt: skip
            if not old.tentative:
                state = "was cancelled" if old.cancelled else "is confirmed"
                raise Conflict(
                    f"Reservation {old.id} does not wait for approval: it {state}. Only a "
                    "tentative booking can be approved or declined."
                )
            given = Decision(outcome, who.name, now, note or None)
            if outcome == APPROVED:
                return Changes(answer=given)
            return Changes(cancelled_at=now, answer=given)

        return self.store.reservations.modify(reservation_id, decide)

    def due(self, now: datetime) -> list[int]:
        """Tentative bookings whose hold ended by `now`."""
        return self.store.approvals.due(now)

    def release(self, reservation_id: int, now: datetime) -> Reservation | None:
        """Release a tentative booking whose hold ended unanswered by `now` (cancelled, its
        slot free); None when it was answered meanwhile or is not due."""

        def decide(old: Reservation) -> Changes:
            if not old.tentative or old.tentative_until is None or old.tentative_until > now:
                raise _NotDue  # rolls the transaction back
            return Changes(cancelled_at=now, answer=Decision(EXPIRED, SYSTEM, now))

        try:
            return self.store.reservations.modify(reservation_id, decide)
        except _NotDue:
            return None

    def approvers(self, res: Reservation, known: dict[str, list[str]]) -> list[str]:
        """Who is asked: the named and known administrators of the booking's hosts' groups;
        where a host is in no group (or its group names nobody gpuhive knows), the site's
        admins as well (`known`: every user gpuhive has seen, with their groups)."""
        site = set(self.authority.admin_users) | {
            name for name, groups in known.items() if self.authority.admin_groups & set(groups)
        }
        asked: set[str] = set()
        for host in {g.host for g in res.gpus}:
            group = self.authority.host_group(host)
            theirs = (
                set()
                if group is None
                else set(group.admins)
                | {name for name, groups in known.items() if group.admin_groups & set(groups)}
            )
            asked |= theirs or site
        return sorted(asked - {res.owner})
