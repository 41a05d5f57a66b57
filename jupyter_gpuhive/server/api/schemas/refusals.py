"""Pydantic's validation errors as the one sentence a person reads in a dialog.

Statuses: a value of the wrong JSON type, or a field the body may not have, is malformed
(400); a missing field or an unacceptable value is 422. The fields' own checks
(`fields.refuse`) say their status themselves. Unknown fields are named first, all at once;
otherwise the first problem (in the order the model declares its fields) is the one told.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ....errors import BadRequest, Conflict, Forbidden, HiveError, Invalid, NotFound
from ..inputs import shown

# Pydantic error types that mean "a value of the wrong JSON type" (400), and what to say.
_WRONG_TYPE = {
    "string_type": "{field} must be a string.",
    "bool_type": "{field} must be true or false.",
    "int_type": "{field} must be a whole number.",
    "float_type": "{field} must be a number.",
    "list_type": "{field} must be a list.",
    "tuple_type": "{field} must be a list.",
    "dict_type": "{field} must be an object.",
    "model_type": "{field} must be an object.",
    "model_attributes_type": "{field} must be an object.",
    "dataclass_type": "{field} must be an object.",
}


def path(loc: Sequence[int | str]) -> str:
    """A field's location as a client names it: 'windows[0].start'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _quoted(loc: Sequence[int | str]) -> str:
    where = path(loc)
    return f"'{where[:80]}…'" if len(where) > 80 else f"'{where}'"


def _choices(expected: str) -> str:
    """pydantic's "'a', 'b' or 'c'" as 'a, b, c'."""
    return ", ".join(re.findall(r"'([^']*)'", expected)) or expected


def _sentence(error: ErrorDetails) -> tuple[int, str]:
    """The status and the sentence for one pydantic error ({field}: its quoted path)."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "gpuhive":
        return int(ctx["status"]), str(ctx["sentence"])
    if kind in _WRONG_TYPE:
        return 400, _WRONG_TYPE[kind]
    if kind == "missing":
        return 422, "{field} is required."
    value = error.get("input")
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:
        return 422, "{field} must not be empty."
    if kind == "string_too_long":
        size = len(value) if isinstance(value, str) else "too many"
        return 422, f"{{field}} is {size} characters long; the limit is {ctx['max_length']}."
    if kind == "too_short":
        return 422, f"{{field}} must hold at least {ctx['min_length']} items."
    if kind == "too_long":
        return 422, f"{{field}} may hold at most {ctx['max_length']} items."
    if kind in ("literal_error", "enum"):
        got = shown(value) if isinstance(value, str) else "something else"
        return 422, f"{{field}} must be one of {_choices(str(ctx['expected']))}; got {got}."
    bounds = {
        "greater_than_equal": "at least {ge}",
        "greater_than": "more than {gt}",
        "less_than_equal": "at most {le}",
        "less_than": "less than {lt}",
    }
    if kind in bounds:
        return 422, "{field} must be " + bounds[kind].format(**ctx) + "."
    return 422, "{field} is not acceptable: " + error["msg"].rstrip(".") + "."


def refusal(error: ValidationError, unknown: str = "Unknown field(s): {names}.") -> HiveError:
    """The HiveError (400 or 422, one sentence) for a body or query that failed validation.

    `unknown` is the sentence for fields the model does not have ({names}: them, sorted).
    """
    details = error.errors(include_url=False)
    extra = sorted({path(e["loc"]) for e in details if e["type"] == "extra_forbidden"})
    if extra:
        return BadRequest(unknown.format(names=", ".join(extra)))
    first: dict[str, Any] = dict(details[0])
    status, sentence = _sentence(first)  # type: ignore[arg-type]
    loc = first["loc"]
    message = sentence.replace("{field}", _quoted(loc) if loc else "The request body")
    return _BY_STATUS.get(status, Invalid)(message)


_BY_STATUS: dict[int, type[HiveError]] = {
    cls.status: cls for cls in (BadRequest, Forbidden, NotFound, Conflict, Invalid)
}
