"""Violation handlers: what gpuhive does about a violation, chosen and ordered in config.

Built in: ``terminal``, ``email``, ``kill``, ``webhook`` and ``event``. Third parties add
handlers through the entry point group ``jupyter_gpuhive.violation_handlers`` (name -> a
``ViolationHandler`` subclass). Options are checked when a handler is built, so that a
misconfigured handler stops the start-up with a sentence that says what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, ClassVar

from ...hosts.pool import HostPool
from ...integrations.mail import MailSettings
from ...integrations.transport import Transports
from ...model.violations import (
    FOREIGN,
    GHOST,
    GPU_HEALTH,
    HOLDER_KINDS,
    IDLE,
    KINDS,
    NO_SHOW,
    OVER_SHARE,
    UNRESERVED,
    Violation,
)

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "jupyter_gpuhive.violation_handlers"


class HandlerConfigError(ValueError):
    """A handler's configuration is wrong; the message says what to change."""


class HandlerFailed(Exception):
    """A handler could not act; the message (recorded in the history) says why."""


@dataclass(frozen=True, kw_only=True)
class Incident(Violation):
    """What a handler is told about one violation (or idle reservation): the violation as
    recorded, its id, the holder's UNIX user and the reservation's title and end.

    `started_at` (also `since`) is when it began; for an idle reservation, since when its
    GPUs were idle. Messages give times on the site's clock (`zone`), with its name.
    """

    violation_id: int
    holder_unix: str | None = None
    reservation_title: str | None = None
    reservation_end: datetime | None = None
    zone: tzinfo = UTC

    @classmethod
    def of(
        cls,
        violation_id: int,
        violation: Violation,
        holder_unix: str | None = None,
        title: str | None = None,
        end: datetime | None = None,
        zone: tzinfo = UTC,
    ) -> Incident:
        """The incident about a recorded violation (`zone`: the site's, for its messages)."""
        return cls(
            **violation.values(),
            violation_id=violation_id,
            holder_unix=holder_unix,
            reservation_title=title,
            reservation_end=end,
            zone=zone,
        )

    @property
    def since(self) -> datetime:
        """When the violation began (idle: since when the GPUs were idle)."""
        return self.started_at

    @property
    def target(self) -> str | None:
        """The UNIX user to address: the offender, or the holder of an idle reservation."""
        return self.holder_unix if self.kind in HOLDER_KINDS else self.offender

    def fields(self) -> dict[str, Any]:
        """The values message templates may use."""
        end = self.reservation_end
        return {
            "kind": self.kind,
            "host": self.host,
            "gpu": self.gpu,
            "gpu_uuid": self.gpu_uuid,
            "user": self.target or "",
            "offender": self.offender or "",
            "holder": self.holder or "nobody",
            "reservation": self.reservation_id if self.reservation_id is not None else "",
            "title": self.reservation_title or "",
            "end": self._local(end, "%Y-%m-%d %H:%M") if end else "",
            "since": self._local(self.since, "%Y-%m-%d %H:%M:%S"),
            "pids": ", ".join(str(p) for p in self.pids),
            "commands": "; ".join(self.commands),
            "detail": self.detail or "",
            "level": self.level,
        }

    def _local(self, instant: datetime, form: str) -> str:
        """`instant` on the site's clock, with the zone's name then ('CET', 'UTC')."""
        local = instant.astimezone(self.zone)
        return f"{local:{form}} {local.tzname() or self.zone}"

    def to_json(self) -> dict[str, Any]:
        end = self.reservation_end
        return {
            "violation": self.violation_id,
            "kind": self.kind,
            "host": self.host,
            "gpu": self.gpu,
            "gpu_uuid": self.gpu_uuid,
            "offender": self.offender,
            "holder": self.holder,
            "reservation": self.reservation_id,
            "reservation_title": self.reservation_title,
            "reservation_end": end.isoformat() if end else None,
            "since": self.since.isoformat(),
            "pids": list(self.pids),
            "commands": list(self.commands),
            "detail": self.detail,
        }


def describe(incident: Incident) -> str:
    """The default message about an incident, in one or two sentences."""
    f = incident.fields()
    one = len(incident.pids) == 1
    f["procs"] = f"Your process {f['pids']}" if one else f"Your processes {f['pids']}"
    f["run"], f["them"] = ("runs", "it") if one else ("run", "them")
    if incident.kind == FOREIGN:
        return (
            "{procs} on GPU {gpu} {run} on a GPU reserved by {holder} until {end}. "
            "Please stop {them}: gpuhive may stop {them} for you."
        ).format(**f)
    if incident.kind == UNRESERVED:
        return (
            "{procs} on GPU {gpu} {run} on a GPU nobody reserved. "
            "Reserve GPUs in gpuhive before you use them: gpuhive may stop {them} for you."
        ).format(**f)
    if incident.kind == OVER_SHARE:
        return (
            "{procs} on GPU {gpu} {run} on your share of it and {detail}. Please keep to your "
            "share (the others on this GPU need theirs): gpuhive may stop {them} for you."
        ).format(**f)
    if incident.kind == GHOST:
        return "GPU {gpu} shows {detail} (reservation holder: {holder}).".format(**f)
    if incident.kind == NO_SHOW:
        return (
            "Your reservation {reservation} ('{title}', until {end}) began at {since} and no "
            "process of yours has run on its GPUs {gpu} since. It will be released for others "
            "unless you start using it."
        ).format(**f)
    if incident.kind == GPU_HEALTH:
        return incident.detail or "A GPU of your reservation {reservation} failed.".format(**f)
    if incident.kind == IDLE:
        return (
            "The GPUs {gpu} of your reservation {reservation} ('{title}', until {end}) have "
            "been idle since {since}. Please end the reservation if you are done."
        ).format(**f)
    return "GPU {gpu}: {kind} ({detail}).".format(**f)


SAMPLE = Incident.of(
    0,
    Violation(FOREIGN, "gpu1", "gpu1:0", "GPU-0", "bob", "alice", 1, 1, (1,), ("python",), None,
              datetime(2026, 1, 1)),
    "alice", "t",
)  # fmt: skip


def check_template(handler: str, key: str, template: str) -> str:
    """Return `template` if it formats with the incident fields; else explain what is wrong."""
    try:
        template.format(**SAMPLE.fields())
    except (KeyError, IndexError, ValueError) as error:
        known = ", ".join(f"{{{k}}}" for k in SAMPLE.fields())
        raise HandlerConfigError(
            f"violation handler '{handler}': the template in '{key}' is not valid ({error!r}); "
            f"it may use {known}."
        ) from None
    return template


class Options:
    """A handler's options, read with type checks; unknown keys are refused."""

    def __init__(self, handler: str, values: Mapping[str, Any]) -> None:
        if not isinstance(values, Mapping):
            raise HandlerConfigError(
                f"violation handler '{handler}': options must be a mapping, not {values!r}."
            )
        self.handler = handler
        self.values = dict(values)
        self.used: set[str] = set()

    def _error(self, key: str, wanted: str) -> HandlerConfigError:
        value = self.values.get(key)
        return HandlerConfigError(
            f"violation handler '{self.handler}': option '{key}' must be {wanted}, not {value!r}."
        )

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.values.get(key, default)

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.get(key, default)
        if value is None and required:
            raise HandlerConfigError(
                f"violation handler '{self.handler}' needs the '{key}' option."
            )
        if value is not None and (not isinstance(value, str) or not value):
            raise self._error(key, "a non-empty string")
        return value  # type: ignore[no-any-return]

    def number(self, key: str, default: float, *, minimum: float = 0.0) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
            raise self._error(key, f"a number of at least {minimum:g}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self._error(key, "true or false")
        return value

    def texts(self, key: str, default: Iterable[str] = ()) -> list[str]:
        value = self.get(key, list(default))
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise self._error(key, "a list of strings")
        if not all(isinstance(v, str) and v for v in value):
            raise self._error(key, "a list of strings")
        return list(value)

    def mapping(self, key: str) -> dict[str, str]:
        value = self.get(key, {})
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self._error(key, "a mapping of strings to strings")
        return dict(value)

    def choice(self, key: str, default: str, choices: Iterable[str]) -> str:
        allowed = list(choices)
        value = self.get(key, default)
        if value not in allowed:
            raise self._error(key, "one of " + ", ".join(repr(c) for c in allowed))
        return value  # type: ignore[no-any-return]

    def finish(self) -> None:
        """Refuse options nobody read (typos would otherwise pass silently)."""
        unknown = sorted(set(self.values) - self.used)
        if unknown:
            raise HandlerConfigError(
                f"violation handler '{self.handler}' has unknown option(s) {', '.join(unknown)}; "
                f"it knows {', '.join(sorted(self.used))}."
            )


@dataclass
class HandlerContext:
    """What handlers may use: the host pool, the event publisher, the site's mail settings,
    the HTTP transport."""

    pool: HostPool | None = None
    publish: Callable[[dict[str, Any]], Any] | None = None
    mail: MailSettings | None = None  # c.GpuHiveApp.notify_email (integrations/mail.py)
    http: Transports | None = None  # the Hive's (integrations/transport.py)


class ViolationHandler:
    """Base of violation handlers: options are checked in __init__, work is done in `handle`."""

    kinds: ClassVar[frozenset[str]] = frozenset(KINDS)  # the incidents it can act on
    needs_target: ClassVar[bool] = False  # needs a user to address (not for ghosts)
    repeat: ClassVar[bool] = True  # fires again (rate limited) while the violation lasts
    default_interval: ClassVar[float] = 60.0
    default_timeout: ClassVar[float] = 30.0
    step_options: ClassVar[frozenset[str]] = frozenset({"message"})

    def __init__(self, name: str, options: Mapping[str, Any], context: HandlerContext) -> None:
        self.name = name
        self.context = context
        opts = Options(name, options)
        self.interval = opts.number("interval", self.default_interval)
        self.timeout = opts.number("timeout", self.default_timeout, minimum=0.1)
        message = opts.text("message")
        self.message = check_template(name, "message", message) if message else None
        wanted = opts.texts("kinds", sorted(self.kinds))
        if not set(wanted) <= self.kinds:
            raise HandlerConfigError(
                f"violation handler '{name}' cannot act on {sorted(set(wanted) - self.kinds)}; "
                f"it handles {sorted(self.kinds)}."
            )
        self.enabled_kinds = frozenset(wanted)
        self.configure(opts)
        opts.finish()

    def configure(self, opts: Options) -> None:
        """Read the handler's own options."""

    def check_step(self, step: Mapping[str, Any]) -> None:
        """Refuse ladder-step options this handler does not understand."""
        opts = Options(self.name, step)
        for key in self.step_options:
            opts.get(key)
        if isinstance(step.get("message"), str):
            check_template(self.name, "message", step["message"])
        opts.finish()

    def applies(self, incident: Incident) -> bool:
        """Whether this handler acts on this incident at all."""
        return incident.kind in self.enabled_kinds and (
            not self.needs_target or bool(incident.target)
        )

    def rate_key(self, incident: Incident) -> Hashable:
        """Incidents with one key share one rate limit (default: per user and GPU)."""
        return incident.target, incident.gpu_uuid, incident.kind

    def deadline(self, step: Mapping[str, Any]) -> float:
        """Seconds one call of `handle` may take."""
        return self.timeout

    def text(self, incident: Incident, step: Mapping[str, Any]) -> str:
        """The message for this incident: the step's template, the handler's, or the default."""
        template = step.get("message") or self.message
        return template.format(**incident.fields()) if template else describe(incident)

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        """Act; return what was done, or raise HandlerFailed (any exception counts as failed)."""
        raise NotImplementedError

    def _pool(self) -> HostPool:
        if self.context.pool is None:
            raise HandlerFailed("no host pool to reach the host with")
        return self.context.pool
