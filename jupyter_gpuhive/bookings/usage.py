"""The usage report: reserved and used GPU-hours per user, per GPU and per reservation."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..model import Reservation


def usage_report(
    start: datetime,
    end: datetime,
    found: Sequence[Reservation],
    measured: Mapping[str, Any],
    per_reservation: Mapping[int, dict[str, Any]],
    gpu_ref: Callable[[int], str],
    *,
    owner: str | None = None,
    users: Collection[str] = (),
) -> dict[str, Any]:
    """The report of [start, end) from its reservations and the measured usage.

    Totals per GPU and for the site always cover everyone. With `owner`, the rows per user
    are only those of `users` (names the owner books and runs as), and the reservations only
    the owner's.
    """
    reserved_by_user: dict[str, float] = {}
    reserved_by_gpu: dict[int, float] = {}
    for res in found:  # a share counts its part: a quarter GPU for 4 h is 1 GPU-hour
        hours = (min(res.end, end) - max(res.start, start)).total_seconds() / 3600 * res.share
        reserved_by_user[res.owner] = reserved_by_user.get(res.owner, 0) + hours * len(res.gpus)
        for gpu in res.gpus:
            reserved_by_gpu[gpu.id] = reserved_by_gpu.get(gpu.id, 0) + hours
    used_by_user = dict(measured["users"])
    used_by_gpu = dict(measured["gpus"])
    names = sorted(set(reserved_by_user) | set(used_by_user))
    gpu_ids = sorted(set(reserved_by_gpu) | set(used_by_gpu))
    total = {  # the whole site's GPU-hours in the window, for everyone
        "reserved_gpu_hours": round(sum(reserved_by_gpu.values()), 4),
        "used_gpu_hours": round(sum(g["used_gpu_hours"] for g in used_by_gpu.values()), 4),
    }
    if owner is not None:
        names = [u for u in names if u in users]
        found = [r for r in found if r.owner == owner]
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "total": total,
        "by_user": [
            {"user": u, "reserved_gpu_hours": round(reserved_by_user.get(u, 0.0), 4),
             **used_by_user.get(u, {"used_gpu_hours": 0.0})}
            for u in names
        ],
        "by_gpu": [
            {"gpu": gpu_ref(g),
             "reserved_hours": round(reserved_by_gpu.get(g, 0.0), 4),
             **used_by_gpu.get(g, {"used_gpu_hours": 0.0})}
            for g in gpu_ids
        ],
        "reservations": [
            {"id": r.id, "owner": r.owner, "title": r.title,
             "gpus": [g.ref for g in r.gpus],
             "reserved_gpu_hours": round(r.gpu_hours(), 4),
             **per_reservation.get(r.id, {"used_gpu_hours": 0.0})}
            for r in found
        ],
    }  # fmt: skip
