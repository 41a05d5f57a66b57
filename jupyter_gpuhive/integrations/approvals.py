"""Telling about approvals (issue #46, item 4): the approvers hear that a booking waits for
them, the holder hears the answer; each through the Lab, e-mail and webhooks, the channels
every other notice takes.

- `tentative`: to the approvers (Lab notice, mail) and, as the webhook event
  `reservation.tentative`, to the approvers' and the holder's endpoints;
- `approved`, `declined`, `expired`: to the holder (Lab notice, mail, and the webhook events
  `reservation.approved`, `reservation.declined`, `reservation.expired`).

The Lab notice travels on the availability event schema (a message for one user; its
`offer` carries `{"approval": kind, "reservation": id}`), which the sidebar already shows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import tzinfo
from typing import Any

from ..model import Identity, Reservation, describe_instant
from ..privacy import ANYONE, Privacy, reservation_json
from .mail import MailSettings
from .notices import tell_each
from .webhooks import Webhooks

log = logging.getLogger(__name__)
KINDS = ("tentative", "approved", "declined", "expired")


def texts(kind: str, res: Reservation, by: str, note: str | None, zone: tzinfo) -> tuple[str, str]:
    """A notice's subject and text."""
    hosts = ", ".join(sorted({g.host for g in res.gpus}))
    what = f"{res.owner}'s booking {res.id} '{res.title}' of {res.held_text()} on {hosts}"
    span = f"{describe_instant(res.start, zone)} to {describe_instant(res.end, zone)}"
    why = f" ({note})" if note else ""
    if kind == "tentative":
        until = describe_instant(res.tentative_until, zone) if res.tentative_until else "?"
        return (
            f"[gpuhive] Approval asked: {res.owner}'s booking on {hosts}",
            f"{what}, {span}, waits for your approval; its slot is held until {until}. "
            "Approve or decline it in the GPU sidebar (Approvals), or through the REST API: "
            f"POST /gpuhive/api/reservations/{res.id}/approve or …/decline.",
        )
    if kind == "approved":
        return (
            f"[gpuhive] Approved: your booking on {hosts}",
            f"{by} approved {what}, {span}{why}. It is confirmed: jobs and kernels may run on it.",
        )
    if kind == "declined":
        return (
            f"[gpuhive] Declined: your booking on {hosts}",
            f"{by} declined {what}, {span}{why}. It is cancelled and its GPUs are free again.",
        )
    return (
        f"[gpuhive] Released: your booking on {hosts} was not approved in time",
        f"Nobody approved {what}, {span}, before its hold ended: it is released (cancelled) "
        "and its GPUs are free again. Book again, or ask the hosts' administrators.",
    )


async def tell(
    kind: str,
    res: Reservation,
    by: str,
    note: str | None,
    approvers: Sequence[str],
    *,
    settings: MailSettings,
    webhooks: Webhooks,
    publish_lab: Callable[[dict[str, Any]], Any] | None,
    privacy: Privacy,
    zone: tzinfo,
) -> None:
    """Tell the people an approval concerns, on every channel that reaches them."""
    subject, text = texts(kind, res, by, note, zone)
    told = list(approvers) if kind == "tentative" else [res.owner]
    offer = {"approval": kind, "reservation": res.id}
    await tell_each(told, subject, text, offer, settings=settings, publish_lab=publish_lab,
                    what="an approval")  # fmt: skip
    data = {
        "reservation": reservation_json(res, Identity(res.owner), privacy),
        "by": by,
        "note": note,
        "approvers": list(approvers),
    }
    public = {"reservation": reservation_json(res, ANYONE, privacy), "by": by}
    await webhooks.emit(f"reservation.{kind}", data, [*told, res.owner], text, public)
