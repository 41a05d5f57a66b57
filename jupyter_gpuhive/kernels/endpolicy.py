"""What happens to a kernel when its reservation ends: the policies, the admin's bounds, choices.

The admin sets which policies users may pick, the default, and the fallback of `extend`
(`c.GpuHiveApp.kernel_end_*`); within that each user picks a policy per kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..errors import Invalid

WARN = "warn"  # keep running; protection treats it as any process past its reservation
INTERRUPT = "interrupt"  # stop the running cell (KeyboardInterrupt); the kernel stays
SHUTDOWN = "shutdown"  # shut the kernel down: its GPUs are free
EXTEND = "extend"  # extend the reservation when the next slot is free, else the fallback
POLICIES = (WARN, INTERRUPT, SHUTDOWN, EXTEND)

DESCRIPTIONS = {
    WARN: "keep running (protection then treats it as any process past its reservation)",
    INTERRUPT: "interrupt the running cell; the kernel stays",
    SHUTDOWN: "shut the kernel down",
    EXTEND: "extend the reservation if its GPUs are free next, else the fallback",
}


@dataclass(frozen=True)
class EndSettings:
    """The admin's bounds on end policies, and the timing of warnings and checks."""

    default: str = SHUTDOWN
    allowed: tuple[str, ...] = POLICIES
    fallback: str = SHUTDOWN
    warn_before: timedelta = timedelta(minutes=10)
    extend_by: timedelta = timedelta(minutes=30)
    tick: float = 5.0  # the longest a check waits (edits of a reservation are seen by then)

    def __post_init__(self) -> None:
        unknown = [p for p in (*self.allowed, self.default, self.fallback) if p not in POLICIES]
        if unknown:
            raise Invalid(
                f"Unknown kernel end policy {unknown[0]!r}; known: {', '.join(POLICIES)}."
            )
        if self.default not in self.allowed:
            raise Invalid(f"The default kernel end policy {self.default!r} is not allowed.")
        if self.fallback == EXTEND or self.fallback not in (*self.allowed, WARN):
            raise Invalid(
                f"The fallback of 'extend' must be an allowed policy other than extend, "
                f"not {self.fallback!r}."
            )

    @property
    def extend_lead(self) -> timedelta:
        """How long before the end an extension is tried (an ended one cannot change)."""
        return timedelta(seconds=2 * self.tick + 1)

    def choice(self, policy: str | None = None, fallback: str | None = None) -> Choice:
        """A user's choice checked against the bounds (None: the admin's default)."""
        chosen = self.default if policy is None else policy
        then = self.fallback if fallback is None else fallback
        for name, value in (("policy", chosen), ("fallback", then)):
            if value not in POLICIES:
                raise Invalid(f"Unknown {name} {value!r}; choose one of {', '.join(self.allowed)}.")
            if value not in self.allowed and not (name == "fallback" and value == WARN):
                raise Invalid(
                    f"The {name} {value!r} is not allowed here; the administrator allows "
                    f"{', '.join(self.allowed)}."
                )
        if then == EXTEND:
            raise Invalid("The fallback of 'extend' cannot be 'extend' itself.")
        return Choice(chosen, then)


@dataclass(frozen=True)
class Choice:
    """A kernel's end policy and, for `extend`, what to do when the slot is taken."""

    policy: str
    fallback: str


def clock(instant: datetime) -> str:
    """An instant as people read it in messages (UTC, ISO 8601 to the minute)."""
    return instant.strftime("%Y-%m-%d %H:%M UTC")


def warning_text(reservation_id: int, gpus: str, end: datetime, choice: Choice) -> str:
    """The warning a notebook gets N minutes before its GPUs stop being its own."""
    then = DESCRIPTIONS[choice.policy]
    if choice.policy == EXTEND:
        then = f"extend the reservation if the GPUs are free next, else {choice.fallback}"
    return (
        f"gpuhive: reservation {reservation_id} on {gpus} ends at {clock(end)}; "
        f"then this kernel's end policy will {then}."
    )
