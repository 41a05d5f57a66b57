"""What the API accepts as input: the size and depth limits, and text checks."""

from __future__ import annotations

import re
from typing import Any

from ...errors import BadRequest, Invalid

# Every request body is refused above this size (413), before it is parsed. The one limit of
# the API, stated in the OpenAPI document and the README.
MAX_BODY_BYTES = 1024 * 1024
# No request of this API nests JSON more than a few levels; deeper bodies are refused (400).
MAX_JSON_DEPTH = 32
# Whole-number query parameters beyond this are refused (422): larger ones would only
# overflow a database driver or a host's shell arithmetic. 2^53 - 1: exact in JSON too.
INT_MAX = 2**53 - 1
DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also takes '²' and '١'
INTEGER = re.compile(r"[+-]?[0-9]+")
NO_CREDENTIALS = (
    "This request carries no valid credentials; send your token as 'Authorization: token <token>'."
)
TOO_DEEP = f"The request body nests JSON more than {MAX_JSON_DEPTH} levels deep."


def shown(value: str, limit: int = 40) -> str:
    """A client's value quoted for an error message, cut short when it is long."""
    return repr(value[:limit]) + ("…" if len(value) > limit else "")


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _check_text(text: str, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(
            f"{field} contains a lone UTF-16 surrogate (such as \\ud800), which is not text; "
            "send valid Unicode."
        ) from None
    if "\0" in text:
        raise Invalid(
            f"{field} contains a NUL character (\\u0000), which no command, file name or "
            "stored text can hold."
        )


def check_json(data: Any) -> None:
    """Refuse what JSON can carry but nothing after it can: deep nesting, lone surrogates, NUL."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value, f"'{_cut(where)}'" if where else "The request body")
            continue
        if isinstance(value, dict):
            items: Any = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            continue
        if depth >= MAX_JSON_DEPTH:
            raise BadRequest(TOO_DEEP)
        for key, item in items:
            if isinstance(key, str):
                _check_text(key, f"A name in '{_cut(where)}'" if where else "A field name")
                path = f"{where}.{key}" if where else key
            else:
                path = f"{where}[{key}]"
            stack.append((item, path, depth + 1))
