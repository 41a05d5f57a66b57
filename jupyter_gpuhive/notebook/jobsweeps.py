"""A job body's sweep, built one way for the job builder and the %%gpujob magic."""

from __future__ import annotations

import re
from collections.abc import Iterable

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def sweep_body(entries: Iterable[str]) -> dict[str, list[str]]:
    """'name=v1,v2' entries as the body's `sweep` ({"lr": ["0.1", "0.01"]}): names and values
    without surrounding spaces, in the order given; ValueError says what is wrong."""
    out: dict[str, list[str]] = {}
    for entry in entries:
        name, sep, rest = entry.partition("=")
        name = name.strip()
        if not sep or not NAME.match(name):
            raise ValueError(f"The sweep '{entry.strip()}' must look like name=value1,value2.")
        values = [v.strip() for v in rest.split(",")]
        if any(not v for v in values):
            raise ValueError(
                f"The sweep '{entry.strip()}' has an empty value (commas separate values)."
            )
        if name in out:
            raise ValueError(f"The sweep '{name}' is given twice.")
        out[name] = values
    return out


def clashing(variables: Iterable[str], sweep: Iterable[str]) -> str | None:
    """What is wrong when a name is both a variable and a sweep (None: nothing)."""
    both = sorted(set(variables) & set(sweep))
    return f"{', '.join(both)} is both a variable and a sweep." if both else None
