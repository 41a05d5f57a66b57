"""What the magics read from their command lines: GPU lists and local times."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from datetime import time as clock_time

from IPython.core.error import UsageError

from .clock import local_zone

UTC = timezone.utc


def parse_gpu_args(items: Sequence[str]) -> tuple[list[str], int | None]:
    """'gpu1:0,1 gpu2:0' → explicit GPUs ('gpu1:0/mig5' or a MIG UUID: a MIG slice);
    a single number → a count."""
    if len(items) == 1 and items[0].isdigit():
        return [], int(items[0])
    gpus: list[str] = []
    for item in items:
        if item.startswith(("GPU-", "MIG-")):
            gpus.append(item)
            continue
        host, sep, indices = item.partition(":")
        if not sep or not indices:
            raise UsageError(f"'{item}' is not a GPU list: write host:0,1 (or a count like 2).")
        for index in indices.split(","):
            number, slash, part = index.strip().partition("/")
            if not number.isdigit():
                raise UsageError(f"'{item}': GPU indices must be numbers.")
            if slash and not _SLICE.fullmatch(part):
                raise UsageError(
                    f"'{item}': name a MIG slice as host:index/migGI, e.g. gpu1:0/mig5."
                )
            gpus.append(f"{host}:{index.strip()}")
    return gpus, None


_SLICE = re.compile(r"mig\d+(\.\d+)?")


def parse_when(text: str, now: datetime) -> datetime:
    """ISO 8601 (local time if no offset), or 'HH:MM' today (tomorrow if already past).

    Local times take the offset their own day has in the kernel's zone, not today's (they
    differ across a DST change).
    """
    zone = local_zone()
    day = now.astimezone(zone).date()
    try:
        if len(text) <= 5 and ":" in text:
            hour, minute = (int(p) for p in text.split(":"))
            when = datetime.combine(day, clock_time(hour, minute), tzinfo=zone)
            if when.astimezone(UTC) <= now.astimezone(UTC):
                when = datetime.combine(day + timedelta(days=1), when.time(), tzinfo=zone)
            return when
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"Cannot read the time {text!r}: use HH:MM or ISO 8601.") from None
    return when if when.tzinfo else when.replace(tzinfo=zone)


CELL_MAGICS = ("gpujob",)  # gpuhive's cell magics (each is a line magic as well)
HELP_FLAGS = frozenset({"-h", "--help"})


def help_cell(lines: list[str]) -> list[str]:
    """An input transformer: `%%gpujob -h` over an empty body becomes the line magic `%gpujob -h`
    (IPython refuses a cell magic with an empty body before the magic could show its help)."""
    if not lines or any(line.strip() for line in lines[1:]):
        return lines
    words = lines[0].split()
    if not words or words[0] not in {f"%%{m}" for m in CELL_MAGICS}:
        return lines
    if not HELP_FLAGS & set(words[1:]):
        return lines
    return [lines[0].replace("%%", "%", 1)]
