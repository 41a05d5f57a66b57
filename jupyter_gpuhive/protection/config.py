"""Protection's configuration: the settings, the escalation ladder, and the handlers they name.

Everything is checked when Protection is built, so that a misconfiguration stops the start-up
with a sentence that says what to fix (HandlerConfigError).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Any

from .handlers import HandlerConfigError, HandlerContext, ViolationHandler, build_handlers
from .violations import DetectionPolicy

DEFAULT_LADDER: tuple[Mapping[str, Any], ...] = ({"after": 0, "handler": "terminal"},)


@dataclass(frozen=True)
class Step:
    """One rung of the escalation ladder: after `after` seconds, call `handler`."""

    index: int
    after: float
    handler: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class ProtectionSettings:
    """Everything protection needs from configuration."""

    level: int = 1
    ladder: Sequence[Mapping[str, Any]] = DEFAULT_LADDER
    handlers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    allow_users: Collection[str] = ()
    allow_commands: Sequence[str] = ()
    ghost_mem_mib: int = 1024
    ghost_util: int = 10
    over_share_mib: int = 512  # how much more than the share a share holder may use
    idle_after: float = 0.0  # seconds; 0: idle reservations are not watched
    idle_util: float = 5.0
    idle_end: bool = False
    idle_end_after: float = 1800.0
    idle_handlers: Sequence[str] = ("event",)
    noshow_after: float = 0.0  # seconds; 0: no-shows are not watched (protection.noshow)
    noshow_release_after: float = 1800.0
    noshow_handlers: Sequence[str] = ("event",)
    # the host group of a host, whose own no-show times apply there (None: no host groups)
    host_group: Callable[[str], str | None] | None = field(default=None, compare=False)
    health_handlers: Sequence[str] = ("event",)  # holders of a failed or drained GPU
    user_map: Mapping[str, str] = field(default_factory=dict)  # gpuhive user -> UNIX user
    # Rootful containers gpuhive did not start (hosts/containers.py): the label the site
    # trusts to name their owner (None: none), and what an unattributed one is.
    container_owner_label: str | None = None
    unattributed_containers: str = "violation"


def parse_ladder(raw: Any) -> list[Step]:
    """Ladder steps from config, ordered by delay; bad entries raise HandlerConfigError."""
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise HandlerConfigError(f"the violation ladder must be a list of steps, not {raw!r}.")
    steps = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise HandlerConfigError(f"violation ladder step {i} must be a mapping: {entry!r}.")
        options = dict(entry)
        after, handler = options.pop("after", 0), options.pop("handler", None)
        if isinstance(after, bool) or not isinstance(after, int | float) or after < 0:
            raise HandlerConfigError(
                f"violation ladder step {i}: 'after' must be seconds (≥ 0), not {after!r}."
            )
        if not isinstance(handler, str) or not handler:
            raise HandlerConfigError(f"violation ladder step {i} names no 'handler': {entry!r}.")
        steps.append(Step(i, float(after), handler, options))
    return sorted(steps, key=lambda s: (s.after, s.index))


@dataclass(frozen=True)
class Configured:
    """What the settings build: the detection policy, the ladder and the handlers by name."""

    policy: DetectionPolicy
    ladder: list[Step]
    handlers: dict[str, ViolationHandler]


def configure(
    settings: ProtectionSettings,
    context: HandlerContext,
    handler_types: Mapping[str, type[ViolationHandler] | EntryPoint] | None = None,
) -> Configured:
    """Check the settings and build the handlers the ladder, idle and no-show notices use."""
    try:
        policy = DetectionPolicy.build(
            settings.level,
            settings.allow_users,
            settings.allow_commands,
            settings.ghost_mem_mib,
            settings.ghost_util,
            settings.over_share_mib,
        )
    except ValueError as error:
        raise HandlerConfigError(str(error)) from None
    if settings.idle_after < 0 or settings.idle_end_after < 0:
        raise HandlerConfigError("idle times must not be negative.")
    ladder = parse_ladder(settings.ladder)
    used = [s.handler for s in ladder]
    if settings.idle_after:
        used += list(settings.idle_handlers)
    if settings.noshow_after:
        used += list(settings.noshow_handlers)
    used += [n for n in settings.health_handlers if n != "event" or context.publish is not None]
    handlers = build_handlers(settings.handlers, context, used, handler_types)
    for step in ladder:
        handlers[step.handler].check_step(step.options)
    return Configured(policy, ladder, handlers)
