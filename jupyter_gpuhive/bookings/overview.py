"""Occupancy of GPUs × time slots: free, mine, someone else's, or shared with room left."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..errors import Invalid
from ..model import Gpu, Identity, Reservation, isoformat, units_conflict

MAX_SLOTS = 20_000
FREE, MINE, OTHERS, SHARED = "f", "m", "o", "s"
_FULL = 1 - 1e-9  # the shares of a slot add up to a whole GPU from here on


def occupancy(
    reservations: Sequence[Reservation],
    gpus: Sequence[Gpu],
    start: datetime,
    end: datetime,
    slot: timedelta,
    me: Identity,
) -> dict[str, Any]:
    """The overview grid: per GPU a state string ('f'/'m'/'o' per slot) and reservation ids."""
    if end <= start:
        raise Invalid("The end must be after the start.")
    count = math.ceil((end - start) / slot)
    if count > MAX_SLOTS:
        raise Invalid(
            f"That is {count} slots per GPU; at most {MAX_SLOTS} fit in one overview. "
            "Use a larger 'slot' or a shorter window."
        )
    # A booking fills the rows of every unit it keeps out: its own, and with MIG its whole
    # GPU's or each of its slices' (model.units_conflict).
    by_device: dict[int, list[tuple[Gpu, int]]] = {}
    for i, gpu in enumerate(gpus):
        by_device.setdefault(gpu.device_id, []).append((gpu, i))
    cells: list[list[int | None]] = [[None] * count for _ in gpus]
    states: list[list[str]] = [[FREE] * count for _ in gpus]
    shown: dict[int, dict[str, Any]] = {}
    loads: dict[int, list[float]] = {}  # row -> the shares held in each slot (#44)
    for res in reservations:
        first = max(0, math.floor((res.start - start) / slot))
        last = min(count, math.ceil((res.end - start) / slot))
        if first >= last:
            continue
        mark = MINE if res.owner == me.name else OTHERS
        for gpu in res.gpus:
            rows = [row for unit, row in by_device.get(gpu.device_id, ())
                    if units_conflict(unit, gpu)]  # fmt: skip
            if not rows:
                continue
            for row in rows:
                line, state = cells[row], states[row]
                if res.is_share:  # shares: 's' while they leave room, 'm' when one is mine
                    load = loads.setdefault(row, [0.0] * count)
                    for i in range(first, last):
                        load[i] += res.share
                        line[i] = line[i] if line[i] is not None else res.id
                        if state[i] != MINE:
                            state[i] = MINE if mark == MINE else (
                                OTHERS if load[i] >= _FULL else SHARED)  # fmt: skip
                    continue
                for i in range(first, last):
                    if line[i] is None:
                        line[i] = res.id
                        state[i] = mark
            shown.setdefault(
                res.id,
                {
                    "owner": res.owner,
                    "title": res.title,
                    "start": isoformat(res.start),
                    "end": isoformat(res.end),
                    "mine": mark == MINE,
                    "tentative": res.tentative,
                },
            )
    return {
        "start": isoformat(start),
        "end": isoformat(end),
        "slot_seconds": slot.total_seconds(),
        "slots": count,
        "legend": {FREE: "free", MINE: "mine", OTHERS: "others", SHARED: "shared, room left"},
        "gpus": [
            {**gpu.to_json(), "states": "".join(states[i]), "cells": cells[i]}
            for i, gpu in enumerate(gpus)
        ],
        "reservations": {str(rid): info for rid, info in shown.items()},
    }
