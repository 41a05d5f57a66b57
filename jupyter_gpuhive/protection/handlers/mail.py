"""E-mail handler: the offender (and admins) told over SMTP, rate-limited.

It sends through the one mail seam (integrations/mail.py). With the site's mail settings
(c.GpuHiveApp.notify_email) and no SMTP options of its own it sends with that very settings
object; each SMTP option it sets (host, port, sender, ssl, starttls, username, password,
verify, timeout) wins over the site's for this handler only, the others come from the site,
or, when the site sends no mail, from the handler's defaults (localhost, port 25 or 465).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from ...integrations import mail
from ...integrations.mail import SMTP_OPTIONS, MailFailed, MailSettings
from ...model.violations import HOLDER_KINDS
from .base import (
    SAMPLE,
    HandlerConfigError,
    HandlerFailed,
    Incident,
    Options,
    ViolationHandler,
    check_template,
)

log = logging.getLogger(__name__)


DEFAULT_SUBJECT = "[gpuhive] {kind} use of GPU {gpu}"
DEFAULT_BODY = """Hello {user},

{message}

GPU:          {gpu} ({gpu_uuid})
Host:         {host}
Reserved by:  {holder}
Reservation:  {reservation} {title}
Ends:         {end}
Processes:    {pids} {commands}
Since:        {since}

-- gpuhive
"""


class EmailHandler(ViolationHandler):
    """E-mails the offender (or idle holder) and, optionally, the admins over SMTP."""

    default_interval = 600.0
    default_timeout = 20.0

    def configure(self, opts: Options) -> None:
        self.smtp = self._smtp(opts)
        self.to_offender = opts.flag("to_offender", True)
        self.admins = opts.texts("admins")
        self.addresses = opts.mapping("addresses")
        template = opts.text("address_template")
        self.address_template = check_template(self.name, "address_template", template or "{user}")
        self.own_addresses = bool(template or self.addresses)  # else the site's, if any
        site_knows = self.site is not None and self.site.knows_addresses
        if self.to_offender and not (self.own_addresses or site_knows):
            raise HandlerConfigError(
                f"violation handler '{self.name}' cannot reach offenders: set "
                "'address_template' (e.g. '{user}@example.org') or 'addresses', or set "
                "'to_offender' to false."
            )
        if not self.to_offender and not self.admins:
            raise HandlerConfigError(f"violation handler '{self.name}' has nobody to write to.")
        subject = opts.text("subject", DEFAULT_SUBJECT) or DEFAULT_SUBJECT
        body = opts.text("body", DEFAULT_BODY) or DEFAULT_BODY
        self.subject = check_template(self.name, "subject", subject)
        self.body = body
        try:
            body.format(**SAMPLE.fields(), message="")
        except (KeyError, IndexError, ValueError) as error:
            raise HandlerConfigError(
                f"violation handler '{self.name}': the template in 'body' is not valid ({error!r})."
            ) from None

    def _smtp(self, opts: Options) -> MailSettings:
        """The SMTP settings: the site's object itself, or a copy with this handler's options."""
        site = self.context.mail
        self.site = site if site is not None and site.enabled else None
        given = {key for key in (*SMTP_OPTIONS, "timeout") if key in opts.values}
        ssl = opts.flag("ssl", self.site.ssl if self.site else False)
        starttls = opts.flag("starttls", self.site.starttls if self.site else False)
        if ssl and starttls:
            raise HandlerConfigError(
                f"violation handler '{self.name}': choose 'ssl' (SMTPS) or 'starttls', not both."
            )
        own: dict[str, Any] = {
            "ssl": ssl,
            "starttls": starttls,
            "host": opts.text("host", "localhost") or "localhost",
            "port": int(opts.number("port", 465 if ssl else 25, minimum=1)),
            "username": opts.text("username"),
            "password": opts.text("password"),
            "verify": opts.flag("verify", True),
            "sender": opts.text("sender", required=self.site is None) or "",
            "timeout": self.timeout,
        }
        if own["username"] and own["password"] is None:
            raise HandlerConfigError(
                f"violation handler '{self.name}': 'username' is set but 'password' is not."
            )
        if self.site is None:
            return MailSettings(**own)
        if not given:
            return self.site  # the one settings object the whole site sends with
        return replace(self.site, **{key: own[key] for key in given})

    def address(self, user: str) -> str | None:
        """The e-mail address of a user (offender's UNIX name or holder's gpuhive name)."""
        if not self.own_addresses and self.site is not None:
            return self.site.address(user)
        return self.addresses.get(user) or self.address_template.format(
            **{**SAMPLE.fields(), "user": user}
        )

    def recipients(self, incident: Incident) -> list[str]:
        """Who gets this incident's e-mail."""
        to = []
        person = incident.holder if incident.kind in HOLDER_KINDS else incident.offender
        address = self.address(person) if self.to_offender and person else None
        if address:
            to.append(address)
        if incident.kind not in HOLDER_KINDS:
            to.extend(a for a in self.admins if a not in to)
        return to

    def rate_key(self, incident: Incident) -> Hashable:
        return incident.target or incident.gpu_uuid, incident.kind

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        to = self.recipients(incident)
        if not to:
            raise HandlerFailed("no recipient for this incident")
        fields = incident.fields()
        subject = self.subject.format(**fields)
        text = self.body.format(**fields, message=self.text(incident, step))
        try:
            await mail.deliver(self.smtp, to, subject, text)
        except MailFailed as error:
            raise HandlerFailed(f"SMTP {self.smtp.host}:{self.smtp.port}: {error}") from None
        return f"e-mailed {', '.join(to)}"
