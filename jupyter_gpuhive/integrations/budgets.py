"""Budget warnings (issue #46, item 3): when what a budget's period used and booked ahead
reaches one of its thresholds (default 80 % and 100 %), its people hear it once per period
and threshold, through the channels every other notice takes: the Lab notice (the
availability event schema: a message for one user, its `offer` carrying `{"budget": id,
"threshold": percent}`), e-mail where the site sends it, and the webhook event
`budget.warning` to their endpoints. A user budget's people are the user; a group's, its
members and its host group's named administrators."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import tzinfo
from typing import Any

from ..model.budgets import UNIT_WORDS, UNITS, Standing
from .mail import MailSettings
from .notices import tell_each
from .webhooks import Webhooks

log = logging.getLogger(__name__)
EVENT = "budget.warning"


def text(standing: Standing, threshold: float, zone: tzinfo) -> tuple[str, str]:
    """A warning's subject and text."""
    budget = standing.budget
    parts = []
    for unit in UNITS:
        allowance = standing.allowance(unit)
        if allowance is not None:
            parts.append(
                f"{standing.spent(unit):.2f} of {allowance:.2f} {UNIT_WORDS[unit]} used or booked"
            )
    reached = "is spent" if threshold >= 100 else f"reached {threshold:g} %"
    return (
        f"[gpuhive] The budget of {budget.subject} {reached}",
        f"The budget of {budget.subject} for {standing.period.label} {reached}: "
        f"{'; '.join(parts)}. {standing.renewal(zone)}",
    )


async def tell(
    standing: Standing,
    threshold: float,
    people: Sequence[str],
    *,
    settings: MailSettings,
    webhooks: Webhooks,
    publish_lab: Callable[[dict[str, Any]], Any] | None,
    zone: tzinfo,
) -> None:
    """Tell a budget's people that it reached `threshold`, on every channel that reaches them."""
    subject, message = text(standing, threshold, zone)
    offer = {"budget": standing.budget.id, "threshold": threshold}
    await tell_each(people, subject, message, offer, settings=settings, publish_lab=publish_lab,
                    what="a budget")  # fmt: skip
    data = {"standing": standing.to_json(), "threshold": threshold}
    await webhooks.emit(EVENT, data, people, message)
