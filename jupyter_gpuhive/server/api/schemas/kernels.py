"""Bodies and answers of the kernel endpoints: kernels on reservations and their end policy."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ....kernels.endpolicy import POLICIES
from .bodies import Closed
from .fields import choice, maybe
from .replies import Reply

Policy = Annotated[str, choice(POLICIES)]


class KernelPolicyBody(Closed):
    """What a kernel does when its reservation ends (within what the admin allows)."""

    unknown = "Unknown field(s): {names}; a kernel's end policy has 'policy' and 'fallback'."

    policy: Policy = Field(
        description="warn (keep running), interrupt, shutdown, or extend (extend the "
        "reservation when the next slot is free, else the fallback)"
    )
    fallback: Annotated[str | None, maybe(choice(POLICIES))] = Field(
        None, description="With extend: what happens when the slot is taken (default: the site's)"
    )

    def value(self) -> tuple[str, str | None]:
        return self.policy, self.fallback


class KernelReply(Reply):
    """A kernel on a reservation: where it runs, until when, and what happens at the end."""

    id: str = Field(description="The Jupyter kernel id")
    owner: str
    reservation_id: int
    host: str | None = None
    gpus: list[str] = Field(default_factory=list)
    state: str | None = None
    start: str | None = Field(None, description="The reservation's start (ISO 8601)")
    end: str | None = Field(None, description="The reservation's end (ISO 8601)")
    seconds_left: float | None = Field(None, description="Until the end, from the server's clock")
    policy: str
    fallback: str
    warned: bool = Field(description="Whether the warning before the end was given")
    events: list[dict[str, object]] = Field(
        default_factory=list, description="The latest warnings and end actions, oldest first"
    )


class KernelList(Reply):
    """My kernels on reservations (admins: everyone's), and the policies I may choose."""

    kernels: list[KernelReply]
    policies: list[str] = Field(description="The end policies the site allows")
    default: str = Field(description="The site's default end policy")
    fallback: str = Field(description="The site's default fallback of 'extend'")
    warning_minutes: float = Field(description="The warning comes this long before the end")
