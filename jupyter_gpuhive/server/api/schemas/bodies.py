"""Request bodies: what each POST, PUT and PATCH takes, and the typed value it becomes.

Each model checks a body's shape (JSON types, lengths, ranges, names it must be one of) with
the field kinds of `fields`; `value()` hands the domain a typed value (`model.requests`), and
the domain checks the rest (unknown GPUs, clashes, access rules, who may do it). Bodies that
document `additionalProperties: false` refuse other fields (400); the others ignore them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ....bookings.reservations import DESCRIPTION_MAX, TITLE_MAX
from ....integrations.subscriptions import CHANNELS, MAX_GPUS
from ....integrations.webhooks import EVENTS, FORMATS, URL_MAX
from ....jobs.admission import PLACEMENTS
from ....jobs.catalog import TEMPLATES
from ....jobs.selection import MODEL_MAX
from ....model import ID_MAX
from ....model.jobs import PREEMPT_SIGNALS
from ....model.requests import (
    Booking,
    BookingChange,
    DigestRequest,
    JobRequest,
    SubscriptionRequest,
    WebhookRequest,
)
from ....model.rules import Rule, parse_rule
from .fields import (
    DURATION,
    FLAG,
    INSTANT,
    MEMORY,
    SHARE,
    Check,
    Duration,
    Flag,
    MaybeDuration,
    MaybeEmail,
    MaybeInstant,
    Names,
    choice,
    integer,
    maybe,
    refuse,
    text,
    whole,
)
from .jobfields import GpuNames, Mounts, Options, StrMap, Sweep

NAME_MAX, TEXT_MAX, COMMAND_MAX, PATH_MAX, HOST_MAX = 120, 4000, 100_000, 4096, 253
IMAGE_MAX = 255


class Body(BaseModel):
    """A JSON object body; strict: a value of another JSON type is refused, not converted."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")
    unknown: ClassVar[str] = "Unknown field(s): {names}."  # the sentence for other fields


class Closed(Body):
    """A body that refuses fields it does not have (400)."""

    model_config = ConfigDict(extra="forbid")


# --- reservations ------------------------------------------------------------------------


def _gpu_refs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise refuse('{field} must be a non-empty list such as ["gpu1:0", "gpu1:1"].')
    if not all(isinstance(item, str) for item in value):
        raise refuse("Each entry of {field} must be a string like 'gpu1:0'.", 400)
    return tuple(item.strip() for item in value)


GPU_REFS = Check(
    _gpu_refs,
    {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "examples": [["gpu1:0"], ["gpu1:0/mig5", "gpu1:1"]],
        "description": "GPUs ('host:index' or UUID) and MIG slices ('host:index/migGI' or "
        "MIG UUID); a whole GPU holds all of its slices",
    },
)
TITLE = text(TITLE_MAX, required=True)
DESCRIPTION = text(DESCRIPTION_MAX)


_LEND = (
    "Preemptible jobs may use its GPUs while the holder has no process on them, and give "
    "them back when the holder starts (false: never lend my GPUs)"
)
_EARLY = "Take lent GPUs back the site's reclaim_before_start_s before the start"


class NewReservation(Body):
    """Book GPUs from `start` (default: now) to `end`, or for `duration`."""

    title: Annotated[str, TITLE]
    gpus: Annotated[tuple[str, ...], GPU_REFS]
    description: Annotated[str | None, maybe(DESCRIPTION)] = ""
    start: MaybeInstant = None
    end: MaybeInstant = None
    duration: MaybeDuration = None
    owner: Annotated[str | None, maybe(text(NAME_MAX, required=True))] = Field(
        None, description="Admins only: book for someone else"
    )
    lend: Flag = Field(True, description=_LEND)
    reclaim_before_start: Flag = Field(False, description=_EARLY)
    share: Annotated[int | None, maybe(SHARE)] = None
    memory: Annotated[int | None, maybe(MEMORY)] = None

    def value(self) -> Booking:
        return Booking(
            title=self.title,
            gpus=self.gpus,
            start=self.start,
            end=self.end,
            duration=self.duration,
            description=self.description or "",
            owner=self.owner,
            lend=self.lend,
            reclaim_before_start=self.reclaim_before_start,
            share=self.share,
            memory_mib=self.memory,
        )


class ReservationChange(Closed):
    """Only these fields can change; any other field is refused (400). Leave a field out to
    keep it; null is refused, except for the description (null: unchanged)."""

    unknown: ClassVar[str] = "Cannot change {names} of a reservation."

    title: Annotated[str | None, TITLE] = None
    description: Annotated[str | None, maybe(DESCRIPTION)] = None
    start: Annotated[datetime | None, INSTANT] = None
    end: Annotated[datetime | None, INSTANT] = None
    duration: Annotated[timedelta | None, DURATION] = None
    gpus: Annotated[tuple[str, ...] | None, GPU_REFS] = None
    lend: Annotated[bool | None, FLAG] = Field(None, description=_LEND)
    reclaim_before_start: Annotated[bool | None, FLAG] = Field(None, description=_EARLY)
    share: Annotated[int | None, maybe(SHARE)] = None
    memory: Annotated[int | None, maybe(MEMORY)] = None

    def value(self) -> BookingChange:
        return BookingChange(
            title=self.title,
            description=self.description,
            start=self.start,
            end=self.end,
            duration=self.duration,
            gpus=self.gpus,
            lend=self.lend,
            reclaim_before_start=self.reclaim_before_start,
            share=self.share,
            memory_mib=self.memory,
        )


# --- access rules ------------------------------------------------------------------------

_DAY = {"anyOf": [{"type": "string", "examples": ["mon-fri"]}, {"type": "integer"}]}
_DAYS = Check(lambda value: value, {"anyOf": [_DAY, {"type": "array", "items": _DAY}]})
_CLOCK = text(5).documented(examples=["08:00"])
_DATE = maybe(text(10).documented(format="date"), (None, ""))


class RuleWindow(Body):
    """A weekly window: days (names, ranges such as 'mon-fri', or 0-6) and local times."""

    days: Annotated[Any, _DAYS] = "mon-sun"
    start: Annotated[str, _CLOCK] = "00:00"
    end: Annotated[str, _CLOCK] = "24:00"


class RuleBody(Body):
    """An access rule: subjects (users, '*' for everyone, groups) x resources (hosts, GPUs;
    none: all) x weekly windows (none: always) x validity dates, in the site's time zone."""

    name: Annotated[str, text(NAME_MAX)] = ""
    users: Names = ()
    groups: Names = ()
    hosts: Names = ()
    gpus: Names = ()
    windows: list[RuleWindow] | None = None
    valid_from: Annotated[str | None, _DATE] = None
    valid_until: Annotated[str | None, _DATE] = None

    def value(self, rule_id: int | None = None) -> Rule:
        """The rule; days, times and dates are read by the rule's own parser (422)."""
        spec = {
            "name": self.name,
            **{key: list(getattr(self, key)) for key in ("users", "groups", "hosts", "gpus")},
            "windows": [window.model_dump() for window in self.windows or ()],
            "valid_from": self.valid_from,
            "valid_until": self.valid_until,
        }
        return parse_rule(spec, rule_id)


# --- jobs --------------------------------------------------------------------------------


def _reservation_id(given: Any) -> int:
    """Any whole number: one that no table holds is the domain's 404 ('There is no ...')."""
    value = integer(given)
    if value is None:
        raise refuse("{field} must be a reservation id (a number).", 400)
    return value


_RESERVATION = Check(_reservation_id, {"type": "integer", "minimum": 0, "maximum": ID_MAX})
_PLACEMENT = (
    "Where a job that asks for a GPU count (options.gpu_count) may run: all GPUs on one host, "
    "waiting for one (required, the default when the count fits the largest host); one host "
    "when one can take it, else as few as possible (preferred, the default for bigger jobs); "
    "anywhere, fullest hosts first (any). Also accepted in options."
)


class NewJob(Body):
    """A job from a template: GPUs by name, a current reservation's, or a count (queued)."""

    name: Annotated[str, text(NAME_MAX, required=True)]
    command: Annotated[str, text(COMMAND_MAX, required=True, code=True)] = Field(
        description="Command template with {fields}; kept exactly as sent"
    )
    template: Annotated[str, choice(TEMPLATES)] = "plain"
    description: Annotated[str, text(TEXT_MAX)] = ""
    gpus: GpuNames = ()
    reservation: Annotated[int | None, maybe(_RESERVATION)] = None
    options: Options = Field(default_factory=dict)
    same_host: Annotated[str | None, maybe(choice(PLACEMENTS))] = Field(
        None, description=_PLACEMENT
    )
    vendor: Annotated[str | None, maybe(text(MODEL_MAX), (None, ""))] = Field(
        None, description="Only this vendor's GPUs (nvidia, amd, or a site's; 422 names the known "
        "ones). Also accepted in options."
    )  # fmt: skip
    model: Annotated[str | None, maybe(text(MODEL_MAX), (None, ""))] = Field(
        None, description="Only GPUs whose name holds this, any case (A100, MI300X). Also "
        "accepted in options."
    )  # fmt: skip
    variables: StrMap = Field(default_factory=dict)
    sweep: Sweep = Field(default_factory=dict)
    env: StrMap = Field(default_factory=dict)
    workdir: Annotated[str | None, maybe(text(PATH_MAX, code=True))] = None
    queued: Flag = False
    walltime: MaybeDuration = None
    start_at: MaybeInstant = None
    stop_at: MaybeInstant = None
    max_retries: Annotated[int, whole(0, 10)] = 0
    start: Flag = Field(False, description="Run now")
    image: Annotated[str | None, maybe(text(IMAGE_MAX, code=True))] = Field(
        None, description="Run each task in this container image (the host's allow-list decides)"
    )
    mounts: Mounts = ()
    preemptible: Flag = Field(
        False, description="Queued jobs: may also run on GPUs reservations lend, and is stopped "
        "(after preempt_signal and grace_s) and requeued when the holder takes them back"
    )  # fmt: skip
    preempt_signal: Annotated[str, choice(PREEMPT_SIGNALS)] = "SIGTERM"
    grace_s: Annotated[int | None, maybe(whole(0, 86400))] = Field(
        None, description="Seconds to checkpoint after the signal (null: the site's; 422 above it)"
    )

    def value(self) -> JobRequest:
        return JobRequest(**{name: getattr(self, name) for name in type(self).model_fields})


# --- integrations ------------------------------------------------------------------------

_HOST = text(HOST_MAX, required=True)


class SiteFeed(Closed):
    """A site feed: every reservation, or one host's."""

    host: Annotated[str | None, maybe(text(HOST_MAX), (None, ""))] = Field(
        None, description="Only this host's GPUs (absent, null or empty: every host)"
    )


def _event_names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise refuse("{field} must be a list of event names.", 400)
    return tuple(value)


_EVENTS = Check(
    _event_names,
    {"type": "array", "minItems": 1, "items": {"type": "string", "enum": [*EVENTS, "*"]}},
)


class NewWebhook(Closed):
    """A webhook endpoint; 'site' (admins only) gets everyone's events."""

    url: Annotated[
        str,
        text(URL_MAX, required=True, code=True).documented(
            pattern="^https?://[^/?#]+", examples=["https://hooks.example.org/x"]
        ),
    ]
    format: Annotated[str, choice(FORMATS)] = "json"
    events: Annotated[tuple[str, ...], _EVENTS] = ("*",)
    site: Flag = Field(False, description="Admins only: everyone's events")

    def value(self) -> WebhookRequest:
        return WebhookRequest(self.url, self.format, self.events, self.site)


class NewSubscription(Closed):
    """Tell me when `gpus` GPUs (on `host`, of `model`) are free for `duration`."""

    duration: Duration
    gpus: Annotated[int, whole(1, MAX_GPUS)] = 1
    host: Annotated[str | None, maybe(_HOST)] = Field(None, description="Only this host")
    model: Annotated[str | None, maybe(_HOST)] = Field(None, description="GPU model contains this")
    deadline: MaybeInstant = None
    channels: list[Annotated[str, choice(CHANNELS)]] | None = Field(
        None,
        min_length=1,
        description="How to tell you; default: every channel that reaches you here (the Lab; "
        "e-mail when the site sends mail; a webhook when you have one for gpus.available)",
    )
    email: MaybeEmail = None
    repeat: Flag = False

    def value(self) -> SubscriptionRequest:
        return SubscriptionRequest(
            duration=self.duration,
            gpus=self.gpus,
            host=self.host,
            model=self.model,
            deadline=self.deadline,
            channels=None if self.channels is None else tuple(sorted(set(self.channels))),
            email=self.email,
            repeat=self.repeat,
        )


class DigestSetting(Closed):
    """My daily digest e-mail on or off (and where it goes)."""

    enabled: Flag
    email: MaybeEmail = None

    def value(self) -> DigestRequest:
        return DigestRequest(self.enabled, self.email)


BODIES: tuple[type[Body], ...] = (
    NewReservation,
    ReservationChange,
    RuleBody,
    NewJob,
    SiteFeed,
    NewWebhook,
    NewSubscription,
    DigestSetting,
)
