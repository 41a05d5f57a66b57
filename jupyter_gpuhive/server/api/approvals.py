"""REST handlers of approvals (issue #46, item 4): an administrator of a tentative booking's
hosts (or a site admin) approves or declines it (bookings/approvals.py)."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...model.approvals import APPROVED, DECLINED
from ...model.authority import WRITE
from .operations import operation
from .schemas import replies
from .schemas.approvals import ApprovalAnswer
from .shown import Shown


class _Answer(Shown):
    auth_resource = "gpuhive:reservations"
    confirms_identity_late = True  # an answer changes the database only
    outcome = APPROVED

    async def _answer(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        note = self.body(ApprovalAnswer).reason if self.request.body else None
        done = await self.hive.bookings.answer(self.who, rid, self.outcome, note)
        self.reply(await self.shown(done))


def answering(what: str) -> Any:
    """The operation of an answer: `what` it does, its body, its reply, its refusals."""
    return operation(
        f"{what} (its hosts' group administrators, site admins)",
        body=ApprovalAnswer,
        reply=replies.ReservationReply,
        errors=(403, 404, 409),
    )


class ApproveHandler(_Answer):
    outcome = APPROVED

    @web.authenticated
    @authorized(WRITE)
    @answering("Approve a tentative booking: it is confirmed and its holder told")
    async def post(self, reservation_id: str) -> None:
        await self._answer(reservation_id)


class DeclineHandler(_Answer):
    outcome = DECLINED

    @web.authenticated
    @authorized(WRITE)
    @answering(
        "Decline a tentative booking: it is cancelled, its GPUs free, and its holder told "
        "(with the reason, if given)"
    )
    async def post(self, reservation_id: str) -> None:
        await self._answer(reservation_id)
