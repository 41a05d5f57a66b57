"""The optional daily digest e-mail: my reservations today and tomorrow, GPUs I booked but
left idle yesterday, and violations on my GPUs yesterday (days in the site's time zone)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any

from ..errors import Invalid
from ..model import Identity, Reservation
from ..model.requests import DigestRequest
from ..store import Store
from ..store.subscriptions import Digests, DigestSetting
from . import mail
from .mail import MailSettings

log = logging.getLogger(__name__)
IDLE_BELOW = 0.10  # a reservation whose GPUs were busy less than this share of the time


def _midnight(day: date, zone: tzinfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=zone)


def setting_json(found: DigestSetting | None, who: str) -> dict[str, Any]:
    if found is None:
        return {"user": who, "enabled": False, "email": None, "last_sent": None}
    return {
        "user": found.owner,
        "enabled": found.enabled,
        "email": found.email,
        "last_sent": found.last_sent.isoformat() if found.last_sent else None,
    }


class DigestService:
    """Builds and sends digests; `send_due` is what the ticker runs (tests call it directly)."""

    def __init__(
        self,
        store: Store,
        rows: Digests,
        mail_settings: MailSettings,
        zone: tzinfo,
        hour: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.rows = rows
        self.mail = mail_settings
        self.zone = zone
        self.hour = hour
        self.now = clock

    def setting(self, who: Identity) -> dict[str, Any]:
        """My digest setting (GET digest)."""
        return setting_json(self.rows.get(who.name), who.name)

    def configure(self, who: Identity, request: DigestRequest) -> dict[str, Any]:
        """Turn my digest on or off (PUT digest)."""
        enabled, email = request.enabled, request.email
        if enabled and not self.mail.enabled:
            raise Invalid("This site sends no e-mail (notify_email is not configured).")
        if enabled and not (email or self.mail.address(who.name)):
            raise Invalid("Give 'email': this site cannot tell your address from your name.")
        return setting_json(self.rows.set(who.name, enabled, email), who.name)

    def build(self, user: str, today: date) -> tuple[str, str]:
        """Subject and text of `user`'s digest for the local day `today`."""
        zone = self.zone
        start, after = _midnight(today, zone), _midnight(today + timedelta(days=2), zone)
        coming = self.store.reservations.window(start, after, owner=user)
        yesterday = _midnight(today - timedelta(days=1), zone)
        past = self.store.reservations.window(yesterday, start, owner=user)
        usage = self.store.usage.by_reservation([r.id for r in past])
        idle: list[tuple[Reservation, str]] = []
        for res in past:
            used = usage.get(res.id)
            if not used or not used["samples"]:
                continue
            share = used["used_gpu_hours"] / max(used["observed_hours"], 1e-9)
            if share < IDLE_BELOW:
                idle.append((res, f"busy {share:.0%} of {used['observed_hours']:.1f} GPU-hours"))
        found = self.store.violations.query(yesterday, start, user=user, limit=200)
        mine = [v for v in found if v.holder == user and v.kind != "idle"]
        lines = [f"Hello {user},", "", "Your GPU reservations today and tomorrow:"]
        lines += [self._line(r) for r in coming] or ["  none"]
        lines += ["", "GPUs you booked but left idle yesterday:"]
        lines += [f"{self._line(r)}: {why}" for r, why in idle] or ["  none"]
        lines += ["", "Violations on your GPUs yesterday:"]
        lines += [
            f"  {v.started_at.astimezone(zone):%H:%M} {v.kind} on {v.gpu}"
            f" by {v.offender or 'an unknown user'}"
            for v in mine
        ] or ["  none"]
        lines += [
            "",
            "-- gpuhive (turn this off through the REST API: "
            'PUT /gpuhive/api/digest {"enabled": false})',
        ]
        subject = f"[gpuhive] Your GPUs on {today:%a %d %b}: {len(coming)} reservation(s)"
        return subject, "\n".join(lines) + "\n"

    def _line(self, res: Reservation) -> str:
        start, end = res.start.astimezone(self.zone), res.end.astimezone(self.zone)
        gpus = ", ".join(g.ref for g in res.gpus)
        return f"  {start:%a %H:%M}–{end:%H:%M} {res.title} ({gpus}; reservation {res.id})"

    def send_due(self, now: datetime | None = None) -> list[str]:
        """Send today's digests if it is past the digest hour; the users written to."""
        now = (now or self.now()).astimezone(self.zone)
        if now.hour < self.hour or not self.mail.enabled:
            return []
        sent = []
        for setting in self.rows.due(now.date()):
            address = setting.email or self.mail.address(setting.owner)
            if not address:
                continue
            subject, text = self.build(setting.owner, now.date())
            try:
                mail.send(self.mail, address, subject, text)
            except Exception as error:  # try again at the next tick
                log.warning("gpuhive: digest to %s failed: %s", address, error)
                continue
            self.rows.sent(setting.owner, now.date())
            sent.append(setting.owner)
        return sent
