"""Availability subscriptions: "tell me when N GPUs (on HOST / of MODEL) are free for D".

Checked when GPUs are released (a cancellation, an edit, an early end) and on the reminder
ticker. A match is offered through the channels the user chose (Lab event, e-mail, webhook)
with a one-click "book it" (POST subscriptions/ID/book, or a magic line) that books exactly
that slot if it is still free: the database's overlap constraint lets one booking win.

With a deadline, any slot that ends by it counts, later ones too (the user named the window):
such a subscription may fire at once. Without one ("tell me when they free up"), only GPUs
free from the moment gpuhive checks count, and it watches for WATCH (24 hours), then ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..errors import Conflict, Invalid, NotFound
from ..model import Gpu, Identity, Reservation
from ..model.errand import Errand
from ..model.requests import Booking, SubscriptionRequest
from ..store import Store
from ..store.subscriptions import Subscription, Subscriptions

log = logging.getLogger(__name__)

CHANNELS = ("lab", "email", "webhook")
MAX_GPUS = 64
WATCH = timedelta(hours=24)  # how long a subscription without a deadline watches


def free_slot(
    gpus: Sequence[Gpu],
    booked: Sequence[Reservation],
    count: int,
    length: timedelta,
    now: datetime,
    deadline: datetime,
) -> tuple[list[Gpu], datetime] | None:
    """The earliest [t, t+length) within [now, deadline] with `count` free GPUs of one host."""
    busy: dict[int, list[tuple[datetime, datetime]]] = {g.id: [] for g in gpus}
    for res in booked:
        for gpu in res.gpus:
            if gpu.id in busy:
                busy[gpu.id].append((res.start, res.end))
    starts = sorted({now} | {end for spans in busy.values() for _, end in spans if end > now})
    by_host: dict[str, list[Gpu]] = {}
    for gpu in sorted(gpus, key=lambda g: (g.host, g.index)):
        by_host.setdefault(gpu.host, []).append(gpu)
    for start in starts:
        end = start + length
        if end > deadline:
            break
        for host_gpus in by_host.values():
            free = [g for g in host_gpus if all(e <= start or s >= end for s, e in busy[g.id])]
            if len(free) >= count:
                return free[:count], start
    return None


def subscription_json(sub: Subscription) -> dict[str, Any]:
    return {
        "id": sub.id,
        "owner": sub.owner,
        "gpus": sub.gpu_count,
        "host": sub.host,
        "model": sub.model,
        "duration_s": sub.seconds,
        "deadline": sub.deadline.isoformat(),
        "starts_now": sub.starts_now,
        "channels": list(sub.channels),
        "email": sub.email,
        "repeat": sub.repeat,
        "active": sub.active,
        "created_at": sub.created_at.isoformat(),
        "fired_at": sub.fired_at.isoformat() if sub.fired_at else None,
        "fired": sub.fired,
        "offer": sub.offer,
    }


class Availability:
    """Subscriptions: make, list, check and book their offers."""

    def __init__(self, store: Store, rows: Subscriptions, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.rows = rows
        self.now = clock

    def parse(
        self, who: Identity, request: SubscriptionRequest, horizon: timedelta
    ) -> dict[str, Any]:
        """A new subscription's values, checked against the site (422 with the reason)."""
        count, host, model = request.gpus, request.host, request.model
        if not 1 <= count <= MAX_GPUS:
            raise Invalid(f"'gpus' must be from 1 to {MAX_GPUS}.")
        if host is not None and self.store.inventory.host(host) is None:
            raise Invalid(f"Unknown host '{host}'.")
        length = request.duration
        now = self.now()
        starts_now = request.deadline is None  # then the deadline is when watching ends
        deadline = request.deadline or now + min(WATCH, horizon)
        if starts_now and length > horizon:
            raise Invalid("Reservations may not reach that far ahead: the duration is too long.")
        if not starts_now and deadline < now + length:
            raise Invalid("The deadline leaves no room for that duration.")
        if deadline > now + horizon:
            raise Invalid("The deadline is further ahead than reservations may be made.")
        channels, email, repeat = request.channels or ("lab",), request.email, request.repeat
        if set(channels) - set(CHANNELS) or not channels:
            raise Invalid(f"'channels' must name some of {', '.join(CHANNELS)}.")
        return {
            "owner": who.name, "gpu_count": count, "host": host, "model": model,
            "seconds": int(length.total_seconds()), "deadline": deadline,
            "channels": sorted(set(channels)), "email": email, "repeat": repeat,
            "created_at": now, "starts_now": starts_now,
        }  # fmt: skip

    def listed(self, who: Identity) -> list[Subscription]:
        """The requester's subscriptions (an admin's: everyone's)."""
        return self.rows.all(None if who.is_admin else who.name)

    def add(self, values: dict[str, Any], errand: Errand | None = None) -> Subscription:
        """Record a subscription `parse` made (`errand`: the API request it is part of)."""
        return self.rows.add(values, errand)

    def remove(self, who: Identity, sub_id: int) -> None:
        """End one of the requester's subscriptions (404 if it is not theirs)."""
        self.owned(who, sub_id)
        self.rows.delete(sub_id)

    def owned(self, who: Identity, sub_id: int) -> Subscription:
        found = self.rows.get(sub_id)
        if found is None or not (who.is_admin or found.owner == who.name):
            raise NotFound(f"There is no subscription {sub_id} of yours.")
        return found

    def candidates(self, sub: Subscription) -> list[Gpu]:
        gpus = self.store.inventory.gpus()
        if sub.host:
            gpus = [g for g in gpus if g.host == sub.host]
        if sub.model:
            wanted = sub.model.lower()
            gpus = [g for g in gpus if g.model and wanted in g.model.lower()]
        return gpus

    def offer(self, sub: Subscription, now: datetime) -> dict[str, Any] | None:
        """The slot this subscription would get now, or None."""
        gpus = self.candidates(sub)
        if len(gpus) < sub.gpu_count:
            return None
        length = timedelta(seconds=sub.seconds)
        latest_end = now + length if sub.starts_now else sub.deadline  # starts_now: from now
        booked = self.store.reservations.window(now, latest_end, gpu_ids=[g.id for g in gpus])
        found = free_slot(gpus, booked, sub.gpu_count, length, now, latest_end)
        if found is None:
            return None
        chosen, start = found
        start = max(start, now)
        refs = [g.ref for g in chosen]
        host = chosen[0].host
        indices = ",".join(str(g.index) for g in chosen)
        hours = f"{sub.seconds}s"
        return {
            "subscription": sub.id,
            "host": host,
            "gpus": refs,
            "start": start.isoformat(),
            "end": (start + length).isoformat(),
            "book": {"method": "POST", "path": f"subscriptions/{sub.id}/book"},
            "magic": f"%gpureserve {host}:{indices} --start {start.isoformat()} --for {hours}",
        }

    def due(self, released: bool) -> list[tuple[Subscription, dict[str, Any]]]:
        """Active subscriptions with a free slot, each recorded as fired (once).

        Repeating ones fire again only when GPUs were just `released`, for a new slot.
        """
        now = self.now()
        self.rows.expire(now)
        out = []
        for sub in self.rows.all(active=True):
            if sub.repeat and sub.fired and not released:
                continue
            found = self.offer(sub, now)
            if found is None:
                continue
            if sub.repeat and sub.offer and _same_slot(sub.offer, found):
                continue  # repeating: only a different slot is news
            if self.rows.fired(sub.id, found, now, keep=sub.repeat):
                out.append((sub, found))
        return out

    def book(self, who: Identity, sub_id: int) -> Booking:
        """The slot last offered, as a booking for the subscriber (409 when none was offered)."""
        sub = self.owned(who, sub_id)
        if not sub.offer:
            raise Conflict(f"Subscription {sub_id} has not offered any GPUs yet.")
        offer = sub.offer
        if datetime.fromisoformat(offer["end"]) <= self.now():
            raise Conflict("That offer has passed; wait for the next one.")
        start = max(datetime.fromisoformat(offer["start"]), self.now())
        end = datetime.fromisoformat(offer["end"])
        title = f"GPUs from subscription {sub_id}"
        return Booking(title, tuple(offer["gpus"]), start, end, owner=sub.owner)


def _same_slot(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(a.get("gpus") == b.get("gpus") and a.get("end") == b.get("end"))


AVAILABILITY_SCHEMA_ID = "https://events.jupyter.org/jupyter_gpuhive/availability"
AVAILABILITY_SCHEMA: dict[str, Any] = {
    "$id": AVAILABILITY_SCHEMA_ID,
    "version": "1",
    "title": "gpuhive GPUs available",
    "description": "GPUs a user's availability subscription asked for are free now.",
    "type": "object",
    "required": ["user", "message", "offer"],
    "properties": {
        "user": {"type": "string"},
        "message": {"type": "string"},
        "offer": {"type": "object"},
    },
}
