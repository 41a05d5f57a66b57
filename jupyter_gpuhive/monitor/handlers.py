"""Violation handlers: what gpuhive does about a violation, chosen and ordered in config.

Built in: ``terminal``, ``email``, ``kill``, ``webhook`` and ``event``. Third parties add
handlers through the entry point group ``jupyter_gpuhive.violation_handlers`` (name -> a
``ViolationHandler`` subclass). Options are checked when a handler is built, so that a
misconfigured handler stops the start-up with a sentence that says what to fix.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import shlex
import smtplib
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from importlib.metadata import EntryPoint, entry_points
from typing import Any, ClassVar

from ..hosts.pool import HostPool, HostUnavailable
from .violations import FOREIGN, GHOST, IDLE, KINDS, UNRESERVED

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "jupyter_gpuhive.violation_handlers"


class HandlerConfigError(ValueError):
    """A handler's configuration is wrong; the message says what to change."""


class HandlerFailed(Exception):
    """A handler could not act; the message (recorded in the history) says why."""


@dataclass(frozen=True)
class Incident:
    """What a handler is told about one violation (or idle reservation)."""

    violation_id: int
    kind: str
    host: str
    gpu: str
    gpu_uuid: str
    offender: str | None  # UNIX user
    holder: str | None  # gpuhive user
    holder_unix: str | None
    reservation_id: int | None
    reservation_title: str | None
    reservation_end: datetime | None
    since: datetime
    level: int
    pids: tuple[int, ...] = ()
    commands: tuple[str, ...] = ()
    detail: str | None = None

    @property
    def target(self) -> str | None:
        """The UNIX user to address: the offender, or the holder of an idle reservation."""
        return self.holder_unix if self.kind == IDLE else self.offender

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
            "end": f"{end:%Y-%m-%d %H:%M} UTC" if end else "",
            "since": f"{self.since:%Y-%m-%d %H:%M:%S} UTC",
            "pids": ", ".join(str(p) for p in self.pids),
            "commands": "; ".join(self.commands),
            "detail": self.detail or "",
            "level": self.level,
        }

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
    if incident.kind == FOREIGN:
        return (
            "Your process(es) {pids} on GPU {gpu} run on a GPU reserved by {holder} until "
            "{end}. Please stop them: gpuhive may stop them for you."
        ).format(**f)
    if incident.kind == UNRESERVED:
        return (
            "Your process(es) {pids} on GPU {gpu} run on a GPU nobody reserved. "
            "Reserve GPUs in gpuhive before you use them: gpuhive may stop them for you."
        ).format(**f)
    if incident.kind == GHOST:
        return "GPU {gpu} shows {detail} (reservation holder: {holder}).".format(**f)
    if incident.kind == IDLE:
        return (
            "The GPUs {gpu} of your reservation {reservation} ('{title}', until {end}) have "
            "been idle since {since}. Please end the reservation if you are done."
        ).format(**f)
    return "GPU {gpu}: {kind} ({detail}).".format(**f)


SAMPLE = Incident(
    0, FOREIGN, "gpu1", "gpu1:0", "GPU-0", "bob", "alice", "alice", 1, "t", None,
    datetime(2026, 1, 1), 1, (1,), ("python",),
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
    """What handlers may use: the host pool and the event publisher."""

    pool: HostPool | None = None
    publish: Callable[[dict[str, Any]], Any] | None = None


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


# --- terminal ------------------------------------------------------------------------------

_TERMINALS = r"""
msg=$(cat)
ttys=$( { ps -o tty= -u "$1" 2>/dev/null; who 2>/dev/null | awk -v u="$1" '$1 == u {print $2}'; } \
  | tr -d ' ' | grep -E '^(pts/[0-9]+|tty[0-9]+)$' | sort -u)
[ -n "$ttys" ] || { echo none; exit 0; }
for t in $ttys; do
  if printf '%s' "$msg" | timeout 5 $2 sh -c 'cat > "$1"' sh "/dev/$t" 2>/dev/null
  then echo "ok $t"; else echo "failed $t"; fi
done
"""


class TerminalHandler(ViolationHandler):
    """Writes a `write`-style message to every terminal (pty, tmux pane) of the user."""

    kinds = frozenset({FOREIGN, UNRESERVED, IDLE})
    needs_target = True
    default_timeout = 15.0

    def configure(self, opts: Options) -> None:
        # Writing to another user's pty needs root or the tty group; `sudo` covers the rest.
        self.sudo = opts.flag("sudo", False)

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        user = incident.target or ""
        banner = f"Message from gpuhive about GPU {incident.gpu} on {incident.host}:"
        body = self.text(incident, step).replace("\n", "\r\n")
        message = f"\r\n\a{banner}\r\n{body}\r\nEOF\r\n"
        prefix = "sudo -n" if self.sudo else ""
        command = "sh -c " + shlex.quote(_TERMINALS) + " sh " + shlex.join([user, prefix])
        try:
            result = await self._pool().run(
                incident.host, command, timeout=self.timeout, stdin=message
            )
        except HostUnavailable as error:
            raise HandlerFailed(f"cannot reach {incident.host}: {error.reason}") from None
        lines = result.stdout.split()
        ok = [t for s, t in zip(lines[::2], lines[1::2], strict=False) if s == "ok"]
        failed = [t for s, t in zip(lines[::2], lines[1::2], strict=False) if s == "failed"]
        if not ok and not failed:
            raise HandlerFailed(f"{user} has no terminal on {incident.host}")
        if not ok:
            raise HandlerFailed(f"could not write to {', '.join(failed)} of {user}")
        more = f" (could not write to {', '.join(failed)})" if failed else ""
        return f"wrote to {', '.join(ok)} of {user}{more}"


# --- kill ----------------------------------------------------------------------------------

SIGNALS = ("INT", "TERM", "HUP", "QUIT", "USR1", "USR2", "KILL")

# $1 user, $2 signal, $3 sudo prefix (may be empty), then the pids. Checks the owner of each
# pid first, so a pid reused by someone else is never touched.
_KILL = r"""
user=$1; sig=$2; sudo=$3; shift 3
for p in "$@"; do
  owner=$(ps -o user:64= -p "$p" 2>/dev/null | tr -d ' ')
  if [ -z "$owner" ]; then echo "gone $p"
  elif [ "$owner" != "$user" ]; then echo "other $p"
  elif $sudo kill -s "$sig" "$p" 2>/dev/null; then echo "sent $p"
  else echo "refused $p"; fi
done
"""


class KillHandler(ViolationHandler):
    """Sends a signal to the offending processes, as the offender (SSH) or via sudo."""

    kinds = frozenset({FOREIGN, UNRESERVED})
    needs_target = True
    repeat = False
    default_interval = 0.0
    step_options = frozenset({"message", "signal", "grace"})

    def configure(self, opts: Options) -> None:
        self.mode = opts.choice("mode", "user", ("user", "sudo"))
        self.sudo = opts.text("sudo", "sudo -n") or "sudo -n"
        self.signal = self._signal(opts.get("signal", "INT"))
        self.grace = opts.number("grace", 0.0)

    def _signal(self, value: Any) -> str:
        name = value.upper().removeprefix("SIG") if isinstance(value, str) else value
        if name not in SIGNALS:
            raise HandlerConfigError(
                f"violation handler '{self.name}': signal must be one of {', '.join(SIGNALS)}, "
                f"not {value!r}."
            )
        return str(name)

    def check_step(self, step: Mapping[str, Any]) -> None:
        super().check_step(step)
        if "signal" in step:
            self._signal(step["signal"])
        if "grace" in step:
            Options(self.name, {"grace": step["grace"]}).number("grace", 0.0)

    def rate_key(self, incident: Incident) -> Hashable:
        return incident.violation_id

    def deadline(self, step: Mapping[str, Any]) -> float:
        return 2 * self.timeout + float(step.get("grace", self.grace))

    async def _send(self, incident: Incident, signal: str, pids: Iterable[int]) -> dict[str, list]:
        user = incident.offender or ""
        as_user = user if self.mode == "user" else None
        prefix = "" if self.mode == "user" else self.sudo
        args = [user, signal, prefix, *(str(p) for p in pids)]
        command = "sh -c " + shlex.quote(_KILL) + " sh " + shlex.join(args)
        try:
            result = await self._pool().run(
                incident.host, command, user=as_user, timeout=self.timeout
            )
        except HostUnavailable as error:
            who = f"as {user}" if as_user else "with sudo"
            raise HandlerFailed(f"cannot reach {incident.host} {who}: {error.reason}") from None
        found: dict[str, list[int]] = {"sent": [], "gone": [], "other": [], "refused": []}
        words = result.stdout.split()
        for state, pid in zip(words[::2], words[1::2], strict=False):
            if state in found and pid.isdigit():
                found[state].append(int(pid))
        return found

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        signal = self._signal(step.get("signal", self.signal))
        grace = float(step.get("grace", self.grace))
        found = await self._send(incident, signal, incident.pids)
        notes = []
        if found["gone"]:
            notes.append(f"already gone: {_pids(found['gone'])}")
        if found["other"]:
            notes.append(f"now owned by someone else, left alone: {_pids(found['other'])}")
        if found["refused"]:
            how = "sudo refused" if self.mode == "sudo" else "kill refused"
            notes.append(f"{how}: {_pids(found['refused'])}")
        if not found["sent"]:
            raise HandlerFailed(f"SIG{signal} not sent: {'; '.join(notes) or 'no process'}")
        done = f"SIG{signal} sent to {_pids(found['sent'])}"
        if grace > 0 and signal != "KILL":
            await asyncio.sleep(grace)
            after = await self._send(incident, "KILL", found["sent"])
            if after["sent"]:
                done += f"; SIGKILL after {grace:g} s to {_pids(after['sent'])}"
            else:
                done += f"; all ended within {grace:g} s"
        return done + (f" ({'; '.join(notes)})" if notes else "")


def _pids(pids: Iterable[int]) -> str:
    return ", ".join(str(p) for p in pids)


# --- e-mail --------------------------------------------------------------------------------

DEFAULT_SUBJECT = "[gpuhive] {kind} use of GPU {gpu}"
DEFAULT_BODY = """Hello {user},

{message}

GPU:          {gpu} ({gpu_uuid})
Host:         {host}
Reserved by:  {holder}
Reservation:  {reservation} {title}
Ends:         {end}
Processes:    {pids} {commands}
Since:        {since}

-- gpuhive
"""


class EmailHandler(ViolationHandler):
    """E-mails the offender (or idle holder) and, optionally, the admins over SMTP."""

    default_interval = 600.0
    default_timeout = 20.0

    def configure(self, opts: Options) -> None:
        self.ssl = opts.flag("ssl", False)
        self.starttls = opts.flag("starttls", False)
        if self.ssl and self.starttls:
            raise HandlerConfigError(
                f"violation handler '{self.name}': choose 'ssl' (SMTPS) or 'starttls', not both."
            )
        self.host = opts.text("host", "localhost") or "localhost"
        self.port = int(opts.number("port", 465 if self.ssl else 25, minimum=1))
        self.username = opts.text("username")
        self.password = opts.text("password")
        if self.username and self.password is None:
            raise HandlerConfigError(
                f"violation handler '{self.name}': 'username' is set but 'password' is not."
            )
        self.verify = opts.flag("verify", True)
        self.sender = opts.text("sender", required=True) or ""
        self.to_offender = opts.flag("to_offender", True)
        self.admins = opts.texts("admins")
        self.addresses = opts.mapping("addresses")
        template = opts.text("address_template")
        self.address_template = check_template(self.name, "address_template", template or "{user}")
        if self.to_offender and not (template or self.addresses):
            raise HandlerConfigError(
                f"violation handler '{self.name}' cannot reach offenders: set "
                "'address_template' (e.g. '{user}@example.org') or 'addresses', or set "
                "'to_offender' to false."
            )
        if not self.to_offender and not self.admins:
            raise HandlerConfigError(f"violation handler '{self.name}' has nobody to write to.")
        subject = opts.text("subject", DEFAULT_SUBJECT) or DEFAULT_SUBJECT
        body = opts.text("body", DEFAULT_BODY) or DEFAULT_BODY
        self.subject = check_template(self.name, "subject", subject)
        self.body = body
        try:
            body.format(**SAMPLE.fields(), message="")
        except (KeyError, IndexError, ValueError) as error:
            raise HandlerConfigError(
                f"violation handler '{self.name}': the template in 'body' is not valid ({error!r})."
            ) from None

    def address(self, user: str) -> str:
        """The e-mail address of a user (offender's UNIX name or holder's gpuhive name)."""
        return self.addresses.get(user) or self.address_template.format(
            **{**SAMPLE.fields(), "user": user}
        )

    def recipients(self, incident: Incident) -> list[str]:
        """Who gets this incident's e-mail."""
        to = []
        person = incident.holder if incident.kind == IDLE else incident.offender
        if self.to_offender and person:
            to.append(self.address(person))
        if incident.kind != IDLE:
            to.extend(a for a in self.admins if a not in to)
        return to

    def rate_key(self, incident: Incident) -> Hashable:
        return incident.target or incident.gpu_uuid, incident.kind

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        to = self.recipients(incident)
        if not to:
            raise HandlerFailed("no recipient for this incident")
        fields = incident.fields()
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = ", ".join(to)
        mail["Subject"] = self.subject.format(**fields)
        mail.set_content(self.body.format(**fields, message=self.text(incident, step)))
        try:
            await asyncio.to_thread(self._send, mail)
        except (OSError, smtplib.SMTPException) as error:
            raise HandlerFailed(f"SMTP {self.host}:{self.port}: {error}") from None
        return f"e-mailed {', '.join(to)}"

    def _send(self, mail: EmailMessage) -> None:
        context = ssl.create_default_context()
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        smtp: smtplib.SMTP
        if self.ssl:
            smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
        else:
            smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        with smtp:
            if self.starttls:
                smtp.starttls(context=context)
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(mail)


# --- webhook -------------------------------------------------------------------------------


class WebhookHandler(ViolationHandler):
    """POSTs JSON to a URL; the payload's 'text' makes it a Slack-compatible message."""

    default_interval = 300.0
    default_timeout = 10.0

    def configure(self, opts: Options) -> None:
        url = opts.text("url", required=True) or ""
        if not url.startswith(("http://", "https://")):
            raise HandlerConfigError(
                f"violation handler '{self.name}': 'url' must start with http:// or https://."
            )
        self.url = url
        self.headers = opts.mapping("headers")
        self.payload = opts.choice("payload", "full", ("full", "text"))

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        body: dict[str, Any] = {"text": f"gpuhive: {self.text(incident, step)}"}
        if self.payload == "full":
            body["violation"] = incident.to_json()
        data = json.dumps(body).encode()
        try:
            status = await asyncio.to_thread(self._post, data)
        except (OSError, urllib.error.URLError) as error:
            raise HandlerFailed(f"POST {self.url}: {error}") from None
        return f"POST {self.url}: {status}"

    def _post(self, data: bytes) -> int:
        headers = {"Content-Type": "application/json", **self.headers}
        request = urllib.request.Request(self.url, data, headers, method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=self.timeout) as reply:  # noqa: S310
            return int(reply.status)


# --- event ---------------------------------------------------------------------------------

EVENT_SCHEMA_ID = "https://events.jupyter.org/jupyter_gpuhive/violation"
_NULLABLE_STRING = {"type": ["string", "null"]}
EVENT_SCHEMA: dict[str, Any] = {
    "$id": EVENT_SCHEMA_ID,
    "version": "1",
    "title": "gpuhive violation",
    "description": "A GPU used against its reservation, or a reservation left idle.",
    "type": "object",
    "required": ["kind", "message", "host", "gpu"],
    "properties": {
        "kind": {"type": "string", "enum": list(KINDS)},
        "message": {"type": "string"},
        "violation": {"type": "integer"},
        "host": {"type": "string"},
        "gpu": {"type": "string"},
        "gpu_uuid": {"type": "string"},
        "offender": _NULLABLE_STRING,
        "holder": _NULLABLE_STRING,
        "reservation": {"type": ["integer", "null"]},
        "reservation_title": _NULLABLE_STRING,
        "reservation_end": _NULLABLE_STRING,
        "since": {"type": "string"},
        "pids": {"type": "array", "items": {"type": "integer"}},
        "commands": {"type": "array", "items": {"type": "string"}},
        "detail": _NULLABLE_STRING,
    },
}


class EventHandler(ViolationHandler):
    """Hands the incident to the server's event publisher (the Lab UI toasts the holder)."""

    def configure(self, opts: Options) -> None:
        if self.context.publish is None:
            raise HandlerConfigError(
                f"violation handler '{self.name}' needs an event publisher, and none was given."
            )

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        assert self.context.publish is not None
        data = {**incident.to_json(), "message": self.text(incident, step)}
        result = self.context.publish(data)
        if inspect.isawaitable(result):
            await result
        return f"event published for {incident.holder or 'the admins'}"


# --- registry ------------------------------------------------------------------------------

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
