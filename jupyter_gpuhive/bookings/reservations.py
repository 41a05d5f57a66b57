"""Booking policy: who may reserve, edit and cancel what, for how long, and when."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..errors import BadRequest, Conflict, Forbidden, Invalid
from ..model import Gpu, Identity, Reservation, describe_duration, parse_duration, parse_instant
from ..model import utcnow as _utcnow
from ..store import Changes, Store
from . import access

TITLE_MAX = 200
DESCRIPTION_MAX = 4000


@dataclass(frozen=True)
class Policy:
    """Site limits on bookings (all configurable)."""

    zone: tzinfo
    min_length: timedelta = timedelta(minutes=5)
    max_length: timedelta = timedelta(days=7)
    horizon: timedelta = timedelta(days=90)
    past_grace: timedelta = timedelta(minutes=5)


def _text(body: dict[str, Any], key: str, limit: int, required: bool) -> str | None:
    value = body.get(key)
    if value is None:
        if required:
            raise Invalid(f"'{key}' is required.")
        return None
    if not isinstance(value, str):
        raise BadRequest(f"'{key}' must be a string.")
    value = value.strip()
    if required and not value:
        raise Invalid(f"'{key}' must not be empty.")
    if len(value) > limit:
        raise Invalid(f"'{key}' is {len(value)} characters long; the limit is {limit}.")
    return value


class ReservationService:
    """The rules of booking, on top of the store. All methods are synchronous."""

    def __init__(
        self,
        store: Store,
        policy: Policy,
        identity_of: Callable[[str], Identity],
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.store = store
        self.policy = policy
        self.identity_of = identity_of
        self.now = clock

    # --- helpers -------------------------------------------------------------------

    def resolve_gpus(self, value: Any) -> list[Gpu]:
        """GPUs named as 'host:index' or UUID; unknown names are refused with the name."""
        if not isinstance(value, list) or not value:
            raise Invalid('\'gpus\' must be a non-empty list such as ["gpu1:0", "gpu1:1"].')
        found: dict[int, Gpu] = {}
        for item in value:
            if not isinstance(item, str):
                raise BadRequest("Each entry of 'gpus' must be a string like 'gpu1:0'.")
            gpu = self.store.inventory.gpu(item.strip())
            if gpu is None:
                raise Invalid(
                    f"Unknown GPU '{item}'. Name GPUs as 'host:index' (e.g. 'gpu1:0') "
                    "or by UUID; GET hosts lists them."
                )
            found[gpu.id] = gpu
        return list(found.values())

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
        self, who: Identity, gpus: Sequence[Gpu], start: datetime, end: datetime
    ) -> None:
        rules = self.store.rules.all()
        problems = access.uncovered(rules, who, gpus, start, end, self.policy.zone)
        if problems:
            gpu, (gap_start, gap_end) = problems[0]
            zone = self.policy.zone
            begin = f"{gap_start.astimezone(zone):%a %Y-%m-%d %H:%M}"
            until = f"{gap_end.astimezone(zone):%a %Y-%m-%d %H:%M}"
            raise Forbidden(
                f"{who.name} may not use {gpu.ref} from {begin} to {until} ({zone}): "
                "no access rule allows it.",
                gpus=[g.ref for g, _ in problems],
            )

    def _span(self, body: dict[str, Any], start: datetime) -> datetime:
        if "end" in body and "duration" in body:
            raise Invalid("Give either 'end' or 'duration', not both.")
        if "duration" in body:
            return start + parse_duration(body["duration"], "duration")
        if "end" not in body:
            raise Invalid("'end' (or 'duration') is required.")
        return parse_instant(body["end"], "end")

    @staticmethod
    def _may_edit(who: Identity, reservation: Reservation, verb: str) -> None:
        if reservation.owner != who.name and not who.is_admin:
            raise Forbidden(
                f"Reservation {reservation.id} belongs to {reservation.owner}; "
                f"only they or an admin may {verb} it."
            )

    # --- commands ------------------------------------------------------------------

    def create(self, who: Identity, body: dict[str, Any]) -> Reservation:
        """Book GPUs; raises Invalid/Forbidden/Conflict with a reason."""
        now = self.now()
        title = _text(body, "title", TITLE_MAX, required=True)
        description = _text(body, "description", DESCRIPTION_MAX, required=False) or ""
        gpus = self.resolve_gpus(body.get("gpus"))
        start = parse_instant(body["start"], "start") if body.get("start") else now
        end = self._span(body, start)
        owner = who
        if body.get("owner") not in (None, who.name):
            if not who.is_admin:
                raise Forbidden("Only admins may book for someone else.")
            if not isinstance(body["owner"], str) or not body["owner"].strip():
                raise BadRequest("'owner' must be a user name.")
            owner = self.identity_of(body["owner"].strip())
        self._check_span(start, end, now, new_start=True)
        self._check_access(owner, gpus, start, end)
        assert title is not None
        return self.store.reservations.create(
            owner.name, title, description, start, end, [g.id for g in gpus]
        )

    def update(self, who: Identity, reservation_id: int, body: dict[str, Any]) -> Reservation:
        """Edit title, description, times or GPUs (one unit); started ones only their end."""
        unknown = set(body) - {"title", "description", "start", "end", "duration", "gpus"}
        if unknown:
            raise BadRequest(f"Cannot change {', '.join(sorted(unknown))} of a reservation.")
        title = _text(body, "title", TITLE_MAX, required=False)
        if "title" in body and not title:
            raise Invalid("'title' must not be empty.")
        description = _text(body, "description", DESCRIPTION_MAX, required=False)
        new_gpus = self.resolve_gpus(body["gpus"]) if "gpus" in body else None
        new_start = parse_instant(body["start"], "start") if "start" in body else None
        rules_needed = new_gpus is not None or new_start is not None or "end" in body
        rules_needed = rules_needed or "duration" in body

        def decide(old: Reservation) -> Changes:
            now = self.now()
            self._may_edit(who, old, "change")
            if old.cancelled:
                raise Conflict(f"Reservation {old.id} was cancelled; it cannot be changed.")
            if old.end <= now:
                raise Conflict(f"Reservation {old.id} has already ended; it cannot be changed.")
            started = old.start <= now
            start = new_start or old.start
            end = self._span(body, start) if ("end" in body or "duration" in body) else old.end
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
            return Changes(
                title=title,
                description=description,
                start=start,
                end=end,
                gpu_ids=tuple(g.id for g in gpus),
            )

        return self.store.reservations.modify(reservation_id, decide)

    def cancel(self, who: Identity, reservation_id: int) -> Reservation:
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

        return self.store.reservations.modify(reservation_id, decide)

    def reflag(self) -> dict[int, str | None]:
        """Flag future reservations no rule allows any more; clear flags that became fine."""
        now = self.now()
        rules = self.store.rules.all()
        live = self.store.reservations.window(now, now + self.policy.horizon * 2)
        changes: dict[int, str | None] = {}
        owners: dict[str, Identity] = {}
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
            if reason != res.flag_reason or bool(reason) != res.flagged:
                changes[res.id] = reason
        self.store.reservations.set_flags(changes)
        return changes
