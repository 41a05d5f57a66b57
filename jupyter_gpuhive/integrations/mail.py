"""The one way e-mail leaves gpuhive: one SMTP settings object, one sender.

Every message goes through `send` (blocking) or `deliver` (off the event loop): the
availability notices, the daily digests and the violation handler `email`. The site's
settings (c.GpuHiveApp.notify_email) are one `MailSettings`; a violation handler that sets
SMTP options of its own sends with a copy of them with its options in place
(protection/handlers/mail.py, docs/how-to/protection.md). tests/test_architecture.py holds
that no other module imports smtplib.
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage

# The options a violation handler may set to override the site's SMTP settings.
SMTP_OPTIONS = ("host", "port", "sender", "ssl", "starttls", "username", "password", "verify")


class MailFailed(Exception):
    """The SMTP server could not be reached or refused the message (the reason in words)."""


@dataclass(frozen=True)
class MailSettings:
    """Where notices go: an SMTP server and how to address a user (empty host: no e-mail)."""

    host: str = ""
    port: int = 25
    sender: str = "gpuhive@localhost"
    address_template: str = ""
    addresses: dict[str, str] = field(default_factory=dict)
    starttls: bool = False
    ssl: bool = False
    username: str | None = None
    password: str | None = None
    timeout: float = 20.0
    verify: bool = True  # check the server's certificate (SMTPS, STARTTLS)

    @property
    def enabled(self) -> bool:
        """Whether the site sends e-mail at all."""
        return bool(self.host)

    @property
    def knows_addresses(self) -> bool:
        """Whether a user's address can be told from their name."""
        return bool(self.address_template or self.addresses)

    def address(self, user: str) -> str | None:
        """A user's e-mail address, or None when the site gave no way to know it."""
        if user in self.addresses:
            return self.addresses[user]
        return self.address_template.format(user=user) if self.address_template else None


def message(
    settings: MailSettings, to: str | Sequence[str], subject: str, body: str
) -> EmailMessage:
    """One plain-text message from the settings' sender."""
    mail = EmailMessage()
    mail["From"] = settings.sender
    mail["To"] = to if isinstance(to, str) else ", ".join(to)
    mail["Subject"] = subject
    mail.set_content(body)
    return mail


def send(settings: MailSettings, to: str | Sequence[str], subject: str, body: str) -> None:
    """Send one plain-text message (blocking; MailFailed when it could not be sent)."""
    mail = message(settings, to, subject, body)
    context = ssl.create_default_context()
    if not settings.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        smtp: smtplib.SMTP
        if settings.ssl:
            smtp = smtplib.SMTP_SSL(
                settings.host, settings.port, timeout=settings.timeout, context=context
            )
        else:
            smtp = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout)
        with smtp:
            if settings.starttls:
                smtp.starttls(context=context)
            if settings.username:
                smtp.login(settings.username, settings.password or "")
            smtp.send_message(mail)
    except (OSError, smtplib.SMTPException) as error:
        raise MailFailed(str(error) or type(error).__name__) from None


async def deliver(settings: MailSettings, to: str | Sequence[str], subject: str, body: str) -> None:
    """`send` on a thread, so the event loop never waits for the SMTP server."""
    await asyncio.to_thread(send, settings, to, subject, body)
