"""The body of an approval's answer (POST reservations/{id}/approve and …/decline)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ....bookings.approvals import NOTE_MAX
from .bodies import Closed
from .fields import maybe, text


class ApprovalAnswer(Closed):
    """An administrator's answer to a tentative booking, with an optional reason (the holder
    reads it). The body may be left out."""

    reason: Annotated[str | None, maybe(text(NOTE_MAX), (None, ""))] = Field(
        None, description="Why (told to the holder with the answer)"
    )
