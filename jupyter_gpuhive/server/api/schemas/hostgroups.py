"""Bodies and answers of the host group endpoints (bookings/hostgroups.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import Field

from ....model.hostgroups import NoShowTimes
from .bodies import Closed
from .fields import DURATION, Check, MaybeDuration, maybe
from .replies import Reply

OFF = (0, "0", "off")


def _after(value: Any) -> timedelta:
    """A duration, or 0 / 'off': no-shows are not watched on the group's hosts."""
    if not isinstance(value, bool) and any(value == off for off in OFF):
        return timedelta(0)
    return DURATION.check(value)  # type: ignore[no-any-return]


AFTER = Check(_after, {"anyOf": [DURATION.schema, {"enum": [0, "0", "off"]}]})


class NoShowBody(Closed):
    """The no-show times on a host group's hosts; null or absent: the site's."""

    unknown = "Unknown field(s): {names}; no-show settings are after and release_after."

    after: Annotated[timedelta | None, maybe(AFTER, (None, ""))] = Field(
        None, description="A booking nobody used this long after it began is a no-show "
        "(0 or 'off': not watched on these hosts)",
    )  # fmt: skip
    release_after: MaybeDuration = Field(None, description="How much later a no-show is released")

    def value(self) -> NoShowTimes:
        return NoShowTimes(self.after, self.release_after)


class HostGroupReply(Reply):
    name: str
    admins: list[str] = Field(description="Users who administer the group's hosts")
    admin_groups: list[str] = Field(description="Groups whose members administer them")
    hosts: list[str] = Field(description="The group's hosts, as configured")
    limits: dict[str, Any] = Field(description="The limits of each user's bookings there")
    noshow: dict[str, Any] = Field(description="The group's own no-show times (null: site's)")
    noshow_in_force: dict[str, Any] = Field(description="The no-show times that apply there")
    updated_by: str | None = None
    updated_at: str | None = None
    flag_changes: dict[str, str | None] | None = Field(
        None, description="A change of limits: reservations newly flagged (reason) or cleared"
    )


class HostGroupList(Reply):
    host_groups: list[HostGroupReply]
