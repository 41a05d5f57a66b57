"""A sweep as JSON and back: what the leader publishes for the other replicas (store.live).

The sweep's dataclasses (samples, GPU metrics, MIG devices, processes, health) and the host
states are written field by field and rebuilt from their type hints, so a replica that takes
a published sweep holds exactly what the leader's sampler took (never a pickle: the database
is no place for code). The JSON is deflated: 20 hosts × 8 GPUs with processes are 100 KB of
JSON, and a tenth of that stored.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
import zlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..hosts.status import HostStatus
from .sampler import Sweep

Published = tuple[Sweep, dict[str, HostStatus]]


def encode(sweep: Sweep, statuses: dict[str, HostStatus]) -> bytes:
    """A sweep and the host states after it, as deflated JSON."""
    data = {"sweep": _plain(sweep), "statuses": _plain(statuses)}
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 1)


def decode(body: bytes) -> Published:
    """A sweep and host states from what `encode` made."""
    data = json.loads(zlib.decompress(body))
    return _typed(Sweep, data["sweep"]), _typed(dict[str, HostStatus], data["statuses"])


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _typed(kind: Any, value: Any) -> Any:
    """`value` (from JSON) as an instance of the type hint `kind`."""
    return _decoder(kind)(value)


def _same(value: Any) -> Any:
    return value


@functools.cache
def _decoder(kind: Any) -> Callable[[Any], Any]:
    """A function that turns JSON values into instances of the type hint `kind` (one per hint,
    made once: a published sweep has thousands of values)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]  # only `X | None` is used
        one = _decoder(inner)
        return lambda v: None if v is None else one(v)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            return lambda v: tuple(item(x) for x in v)
        items = [_decoder(a) for a in args]
        return lambda v: tuple(f(x) for f, x in zip(items, v, strict=True))
    if origin is dict:
        value = _decoder(args[1])
        return lambda v: {k: value(x) for k, x in v.items()}
    if kind is datetime:
        return datetime.fromisoformat
    if kind is float:
        return lambda v: None if v is None else float(v)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        fields = {f.name: _decoder(hints[f.name]) for f in dataclasses.fields(kind) if f.init}
        return lambda v: kind(**{k: fields[k](x) for k, x in v.items() if k in fields})
    return _same
