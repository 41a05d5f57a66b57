"""E-mail handler: the offender (and admins) told over SMTP, rate-limited."""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from collections.abc import Hashable, Mapping
from email.message import EmailMessage
from typing import Any

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
        self.ssl = opts.flag("ssl", False)
        self.starttls = opts.flag("starttls", False)
        if self.ssl and self.starttls:
            raise HandlerConfigError(
                f"violation handler '{self.name}': choose 'ssl' (SMTPS) or 'starttls', not both."
            )
        self.host = opts.text("host", "localhost") or "localhost"
        self.port = int(opts.number("port", 465 if self.ssl else 25, minimum=1))
        self.username = opts.text("username")
        self.password = opts.text("password")
        if self.username and self.password is None:
            raise HandlerConfigError(
                f"violation handler '{self.name}': 'username' is set but 'password' is not."
            )
        self.verify = opts.flag("verify", True)
        self.sender = opts.text("sender", required=True) or ""
        self.to_offender = opts.flag("to_offender", True)
        self.admins = opts.texts("admins")
        self.addresses = opts.mapping("addresses")
        template = opts.text("address_template")
        self.address_template = check_template(self.name, "address_template", template or "{user}")
        if self.to_offender and not (template or self.addresses):
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

    def address(self, user: str) -> str:
        """The e-mail address of a user (offender's UNIX name or holder's gpuhive name)."""
        return self.addresses.get(user) or self.address_template.format(
            **{**SAMPLE.fields(), "user": user}
        )

    def recipients(self, incident: Incident) -> list[str]:
        """Who gets this incident's e-mail."""
        to = []
        person = incident.holder if incident.kind in HOLDER_KINDS else incident.offender
        if self.to_offender and person:
            to.append(self.address(person))
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
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = ", ".join(to)
        mail["Subject"] = self.subject.format(**fields)
        mail.set_content(self.body.format(**fields, message=self.text(incident, step)))
        try:
            await asyncio.to_thread(self._send, mail)
        except (OSError, smtplib.SMTPException) as error:
            raise HandlerFailed(f"SMTP {self.host}:{self.port}: {error}") from None
        return f"e-mailed {', '.join(to)}"

    def _send(self, mail: EmailMessage) -> None:
        context = ssl.create_default_context()
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        smtp: smtplib.SMTP
        if self.ssl:
            smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
        else:
            smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        with smtp:
            if self.starttls:
                smtp.starttls(context=context)
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(mail)
