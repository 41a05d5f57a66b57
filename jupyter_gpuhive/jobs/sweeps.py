"""Sweeps: `lr=0.1,0.01` style specifications and their cartesian product."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

from .tasks import TemplateError
from .template import IDENTIFIER

MAX_COMBINATIONS = 1000

SweepValues = str | int | float
SweepSpecs = Mapping[str, Sequence[SweepValues] | SweepValues] | Iterable[str]


def parse_sweep(spec: str) -> tuple[str, tuple[str, ...]]:
    """Parse `name=v1,v2,...` into the name and its values (verbatim, commas separate)."""
    name, sep, rest = spec.partition("=")
    name = name.strip()
    if not sep:
        raise TemplateError(f"sweep {spec!r}: expected name=value1,value2,...")
    _check_name(name)
    values = tuple(rest.split(","))
    if any(value == "" for value in values):
        raise TemplateError(
            f"sweep {spec!r}: empty value (values are separated by commas; "
            "give a list for values that contain commas or are empty)"
        )
    _check_values(name, values)
    return name, values


def parse_sweeps(specs: SweepSpecs) -> dict[str, tuple[str, ...]]:
    """Normalize specs given as `name=...` strings or as a mapping of name to values."""
    if isinstance(specs, str):
        raise TemplateError("give sweeps as a list of 'name=v1,v2' strings or a mapping")
    result: dict[str, tuple[str, ...]] = {}
    if isinstance(specs, Mapping):
        pairs = [(name, _values(name, given)) for name, given in specs.items()]
    else:
        pairs = [parse_sweep(spec) for spec in specs]
    for name, values in pairs:
        if name in result:
            raise TemplateError(f"sweep variable {name!r} is given twice")
        result[name] = values
    return result


def expand(specs: SweepSpecs, *, max_combinations: int = MAX_COMBINATIONS) -> list[dict[str, str]]:
    """All combinations as variable dicts; the first variable changes slowest."""
    sweeps = parse_sweeps(specs)
    count = math.prod(len(values) for values in sweeps.values())
    if count > max_combinations:
        sizes = " x ".join(f"{len(v)} {name}" for name, v in sweeps.items())
        raise TemplateError(
            f"sweep has {count} combinations ({sizes}); the limit is {max_combinations}"
        )
    names = list(sweeps)
    return [
        dict(zip(names, combination, strict=True))
        for combination in itertools.product(*sweeps.values())
    ]


def _values(name: str, given: Sequence[SweepValues] | SweepValues) -> tuple[str, ...]:
    _check_name(name)
    if isinstance(given, str | int | float) and not isinstance(given, bool):
        items: Sequence[SweepValues] = [given]
    elif isinstance(given, Sequence):
        items = given
    else:
        raise TemplateError(f"sweep {name!r}: values must be a list, not {type(given).__name__}")
    values: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise TemplateError(
                f"sweep {name!r}: value {item!r} must be a string or number, "
                f"not {type(item).__name__}"
            )
        values.append(str(item))
    if not values:
        raise TemplateError(f"sweep {name!r} has no values")
    _check_values(name, tuple(values))
    return tuple(values)


def _check_name(name: str) -> None:
    if not IDENTIFIER.match(name):
        raise TemplateError(f"sweep variable name {name!r} is not an identifier")


def _check_values(name: str, values: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for value in values:
        if "\0" in value:
            raise TemplateError(f"sweep {name!r}: a value contains a NUL byte")
        if value in seen:
            raise TemplateError(f"sweep {name!r}: value {value!r} is given twice")
        seen.add(value)
