"""Plain SMTP for notices and digests (the same options as the violation e-mail handler)."""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass, field
from email.message import EmailMessage


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

    @property
    def enabled(self) -> bool:
        return bool(self.host)

    def address(self, user: str) -> str | None:
        """A user's e-mail address, or None when the site gave no way to know it."""
        if user in self.addresses:
            return self.addresses[user]
        return self.address_template.format(user=user) if self.address_template else None


def send(settings: MailSettings, to: str, subject: str, body: str) -> None:
    """Send one plain-text message (blocking; run it off the event loop)."""
    mail = EmailMessage()
    mail["From"] = settings.sender
    mail["To"] = to
    mail["Subject"] = subject
    mail.set_content(body)
    context = ssl.create_default_context()
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
