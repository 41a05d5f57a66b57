"""The kinds of field the API's bodies and query parameters are made of, each checked once.

A kind is a `Check`: one function that takes the JSON value and returns the typed one or
refuses with a sentence (`refuse`), and the JSON Schema the OpenAPI document states for it.
Use it as `Annotated[str, text(200)]`. Sentences name the field as `{field}`;
`refusals.refusal` puts in its quoted path (e.g. 'windows[0].start').

Text: the limit applies to the text as sent; the value kept is trimmed of surrounding
whitespace, and a required text must not be blank. Code (a job's command) is the one
exception: it is kept exactly as sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from ....errors import HiveError
from ....model import parse_duration, parse_instant
from ....model.shares import parse_memory, share_of_fraction
from ..inputs import shown

_NAME = "\x00field\x00"  # stands for the field's name in the domain parsers' sentences


def refuse(sentence: str, status: int = 422) -> PydanticCustomError:
    """An error with the sentence a person reads; `{field}` stands for the field's path."""
    return PydanticCustomError("gpuhive", "{sentence}", {"sentence": sentence, "status": status})


class Check:
    """A field kind: `check(value)` returns the typed value or raises `refuse(...)`."""

    def __init__(self, check: Callable[[Any], Any], schema: dict[str, Any]) -> None:
        self.check = check
        self.schema = schema

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(self.check)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return dict(self.schema)

    def documented(self, **extra: Any) -> Check:
        """The same check, its schema with more keywords (a pattern, examples)."""
        return Check(self.check, {**self.schema, **extra})


def domain(parse: Callable[[Any, str], Any]) -> Callable[[Any], Any]:
    """A domain parser (value, name) -> value whose HiveError becomes a field's refusal."""

    def check(value: Any) -> Any:
        try:
            return parse(value, _NAME)
        except HiveError as error:
            raise refuse(error.message.replace(f"'{_NAME}'", "{field}"), error.status) from None

    return check


def maybe(kind: Check, absent: Iterable[object] = (None,)) -> Check:
    """`kind`, or None for JSON null (and the other `absent` values): as if not given."""
    nothing = tuple(absent)
    extra = [{"type": "string", "maxLength": 0}] if "" in nothing else []

    def check(value: Any) -> Any:
        return None if any(value is a or value == a for a in nothing) else kind.check(value)

    return Check(check, {"anyOf": [kind.schema, *extra, {"type": "null"}]})


def text(limit: int, *, required: bool = False, code: bool = False) -> Check:
    """A string of at most `limit` characters, trimmed (unless `code`), not blank if required."""

    def check(value: Any) -> str:
        if value is None and required:
            raise refuse("{field} is required.")
        if not isinstance(value, str):
            raise refuse("{field} must be a string.", 400)
        if len(value) > limit:
            raise refuse(f"{{field}} is {len(value)} characters long; the limit is {limit}.")
        if required and not value.strip():
            raise refuse("{field} must not be empty.")
        return value if code else value.strip()

    schema: dict[str, Any] = {"type": "string", "maxLength": limit}
    if required:
        schema.update(minLength=1, pattern=r"\S")
    return Check(check, schema)


def integer(value: Any) -> int | None:
    """A JSON integer as JSON Schema sees one (3 or 3.0, never true), or None."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def whole(low: int, high: int) -> Check:
    """A JSON integer (not a boolean) from `low` to `high`."""

    def check(given: Any) -> int:
        value = integer(given)
        if value is None:
            raise refuse("{field} must be a whole number.", 400)
        if not low <= value <= high:
            raise refuse(f"{{field}} must be a whole number from {low} to {high}.")
        return value

    return Check(check, {"type": "integer", "minimum": low, "maximum": high})


def choice(names: Iterable[str]) -> Check:
    """One of a fixed set of names (another JSON type is malformed: 400)."""
    known = tuple(names)

    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise refuse(f"{{field}} must be one of {', '.join(known)} (a string).", 400)
        if value not in known:
            raise refuse(f"{{field}} must be one of {', '.join(known)}; got {shown(value)}.")
        return value

    return Check(check, {"type": "string", "enum": list(known)})


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise refuse("{field} must be true or false.", 400)
    return value


def _names(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise refuse("{field} must be a list of non-empty names.")
    return tuple(v.strip() for v in value)


def _email(value: Any) -> str:
    if not isinstance(value, str) or "@" not in value:
        raise refuse("{field} must be an e-mail address.")
    return value.strip()


INSTANT = Check(domain(parse_instant), {"type": "string", "format": "date-time"})
DURATION = Check(
    domain(parse_duration),
    {
        "anyOf": [
            {"type": "string", "examples": ["2h"]},
            {"type": "number", "exclusiveMinimum": 0, "maximum": 36525 * 86400},
        ],
        "description": "A duration: '90s', '15m', '2h', '1d', '1w', or a number of seconds.",
    },
)
FLAG = Check(_flag, {"type": "boolean"})
SHARE = Check(
    domain(share_of_fraction),
    {
        "anyOf": [
            {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "examples": [0.25]},
            {"type": "string", "examples": ["1/4"]},
        ],
        "description": "A share of one shareable GPU, as a fraction of it (1: the whole GPU)",
    },
)
MEMORY = Check(
    domain(parse_memory),
    {
        "anyOf": [
            {"type": "string", "examples": ["20G", "512M"]},
            {"type": "integer", "minimum": 1},
        ],
        "description": "A share of one shareable GPU holding this much of its memory: '20G' "
        "(GiB; also '20GiB', '20GB'), '512M' (MiB) or a number of MiB",
    },
)
NAMES = Check(
    _names,
    {
        "anyOf": [
            {"type": "array", "items": {"type": "string", "minLength": 1, "pattern": r"\S"}},
            {"type": "null"},
        ]
    },
)
EMAIL = Check(_email, {"type": "string", "pattern": "@"})

Flag = Annotated[bool, FLAG]
Instant = Annotated[datetime, INSTANT]
Duration = Annotated[timedelta, DURATION]
# Optional ones: null or "" is the same as leaving the field out.
MaybeInstant = Annotated[datetime | None, maybe(INSTANT, (None, ""))]
MaybeDuration = Annotated[timedelta | None, maybe(DURATION, (None, ""))]
Names = Annotated[tuple[str, ...], NAMES]
MaybeEmail = Annotated[str | None, maybe(EMAIL)]
