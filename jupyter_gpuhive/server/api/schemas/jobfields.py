"""The field kinds only a job body has: its GPU names, options, name→value maps and sweep."""

from __future__ import annotations

from typing import Annotated, Any

from ....jobs.sweeps import parse_sweep
from ....jobs.tasks import TemplateError
from .fields import Check, refuse


def _gpu_names(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise refuse('{field} must be a list of GPU names such as ["gpu1:0"].', 400)
    return tuple(value)


def _options(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse("{field} must be an object.", 400)
    return dict(value)


def _str_map(value: Any) -> dict[str, str]:
    """Names to values; values that are not strings are written as Python writes them."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse("{field} must be an object of names to values.", 400)
    return {key: str(item) for key, item in value.items()}


def _sweep(value: Any) -> dict[str, list[str]]:
    """{'lr': ['0.1', '0.01']}, {'lr': '0.1,0.01'} or ['lr=0.1,0.01'] as names to values."""
    if value is None:
        return {}
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        try:
            return {name: list(values) for name, values in map(parse_sweep, value)}
        except TemplateError as error:
            reason = str(error)
            raise refuse(f"Bad sweep: {reason}" + ("" if reason.endswith(".") else ".")) from None
    if isinstance(value, dict):
        return {
            name: [str(x) for x in (given if isinstance(given, list) else str(given).split(","))]
            for name, given in value.items()
        }
    raise refuse(
        '{field} must be an object like {"lr": ["0.1", "0.01"]} or a list like ["lr=0.1,0.01"].',
        400,
    )


def _paths(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise refuse('{field} must be a list of host paths such as ["/data"].', 400)
    return tuple(value)


_NULL = {"type": "null"}  # each of these may be null: the same as leaving it out

GpuNames = Annotated[
    tuple[str, ...],
    Check(
        _gpu_names,
        {
            "anyOf": [{"type": "array", "items": {"type": "string"}}, _NULL],
            "examples": [["gpu1:0"]],
        },
    ),
]
Options = Annotated[
    dict[str, Any],
    Check(
        _options,
        {
            "anyOf": [{"type": "object"}, _NULL],
            "description": "Template options (GET templates lists them), e.g. gpu_count",
        },
    ),
]
Mounts = Annotated[
    tuple[str, ...],
    Check(
        _paths,
        {
            "anyOf": [{"type": "array", "items": {"type": "string"}}, _NULL],
            "description": "Container jobs: host paths to mount, among those the host allows",
        },
    ),
]
StrMap = Annotated[dict[str, str], Check(_str_map, {"anyOf": [{"type": "object"}, _NULL]})]
Sweep = Annotated[
    dict[str, list[str]],
    Check(
        _sweep,
        {
            "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "string"}}, _NULL],
            "description": "{'lr': ['0.1', '0.01']} or ['lr=0.1,0.01']",
        },
    ),
]
