"""Violation handlers: what gpuhive does about a violation, chosen and ordered in config.

Built in: ``terminal``, ``email``, ``kill``, ``webhook`` and ``event``. Third parties add
handlers through the entry point group ``jupyter_gpuhive.violation_handlers`` (name -> a
``ViolationHandler`` subclass). Options are checked when a handler is built, so that a
misconfigured handler stops the start-up with a sentence that says what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .base import (
    ENTRY_POINT_GROUP,
    SAMPLE,
    HandlerConfigError,
    HandlerContext,
    HandlerFailed,
    Incident,
    Options,
    ViolationHandler,
    check_template,
    describe,
)
from .event import EVENT_SCHEMA, EVENT_SCHEMA_ID, EventHandler
from .kill import SIGNALS, KillHandler
from .mail import DEFAULT_BODY, DEFAULT_SUBJECT, EmailHandler
from .terminal import TerminalHandler
from .webhook import WebhookHandler

__all__ = [
    "DEFAULT_BODY",
    "DEFAULT_SUBJECT",
    "ENTRY_POINT_GROUP",
    "EVENT_SCHEMA",
    "EVENT_SCHEMA_ID",
    "SAMPLE",
    "SIGNALS",
    "EmailHandler",
    "EventHandler",
    "HandlerConfigError",
    "HandlerContext",
    "HandlerFailed",
    "Incident",
    "KillHandler",
    "Options",
    "TerminalHandler",
    "ViolationHandler",
    "WebhookHandler",
    "available",
    "build_handlers",
    "check_template",
    "describe",
]

log = logging.getLogger(__name__)


BUILTIN: dict[str, type[ViolationHandler]] = {
    "terminal": TerminalHandler,
    "email": EmailHandler,
    "kill": KillHandler,
    "webhook": WebhookHandler,
    "event": EventHandler,
}


def available() -> dict[str, type[ViolationHandler] | EntryPoint]:
    """Handler types by name: built-ins, then entry points (loaded when used)."""
    found: dict[str, type[ViolationHandler] | EntryPoint] = dict(BUILTIN)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in BUILTIN:
            log.warning("gpuhive: ignoring plugin %s: it would replace a built-in", point.value)
            continue
        found.setdefault(point.name, point)
    return found


def _resolve(kind: str, name: str, known: Mapping[str, Any]) -> type[ViolationHandler]:
    found = known.get(kind)
    if found is None:
        raise HandlerConfigError(
            f"violation handler '{name}' has unknown type '{kind}'; known types: "
            f"{', '.join(sorted(known))}."
        )
    if isinstance(found, EntryPoint):
        try:
            found = found.load()
        except Exception as error:
            raise HandlerConfigError(
                f"violation handler type '{kind}' ({found.value}) cannot be loaded: {error}"
            ) from None
    if not (isinstance(found, type) and issubclass(found, ViolationHandler)):
        raise HandlerConfigError(f"violation handler type '{kind}' is not a ViolationHandler.")
    return found


def build_handlers(
    config: Mapping[str, Mapping[str, Any]],
    context: HandlerContext,
    used: Iterable[str] = (),
    known: Mapping[str, type[ViolationHandler] | EntryPoint] | None = None,
) -> dict[str, ViolationHandler]:
    """Build the configured handlers plus the `used` ones that need no options.

    `config` maps a handler name to its options; the option 'type' picks the handler type
    (default: the name), so one type can serve twice ('email-admins': {'type': 'email', …}).
    """
    types = known if known is not None else available()
    built: dict[str, ViolationHandler] = {}
    for name in [*config, *(n for n in used if n not in config)]:
        if name in built:
            continue
        options = dict(config.get(name) or {})
        kind = options.pop("type", name)
        if not isinstance(kind, str):
            raise HandlerConfigError(f"violation handler '{name}': 'type' must be a string.")
        built[name] = _resolve(kind, name, types)(name, options, context)
    return built
