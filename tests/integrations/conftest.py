"""Fixtures of the integration tests: a real SMTP server (aiosmtpd) from the protection tests."""

from tests.protection.conftest import Mailbox, smtp_server  # noqa: F401
