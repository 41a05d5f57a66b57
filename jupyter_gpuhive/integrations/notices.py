"""A notice to people, in the Lab and by e-mail: what approvals and budget warnings send
(each adds its webhook event). The Lab notice travels on the availability event schema: a
message for one user, with an `offer` object that says what it is about."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from . import mail
from .mail import MailSettings

log = logging.getLogger(__name__)


async def tell_each(
    people: Iterable[str],
    subject: str,
    text: str,
    offer: dict[str, Any],
    *,
    settings: MailSettings,
    publish_lab: Callable[[dict[str, Any]], Any] | None,
    what: str,
) -> None:
    """Tell each of `people` in the Lab and, where the site sends mail, by e-mail (`what`:
    the notice's kind in the log, 'approval')."""
    for user in people:
        if publish_lab is not None:
            try:
                result = publish_lab({"user": user, "message": text, "offer": offer})
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("gpuhive: could not publish %s notice", what)
        address = settings.address(user)
        if settings.enabled and address:
            body = f"Hello {user},\n\n{text}\n\n-- gpuhive\n"
            try:
                await mail.deliver(settings, address, subject, body)
            except Exception as error:
                log.warning("gpuhive: %s e-mail to %s failed: %s", what, address, error)
