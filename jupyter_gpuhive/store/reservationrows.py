"""Rows of the reservations and reservation_gpus tables, read back as the model's Reservation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, select

from ..model import Gpu, Reservation
from .schema import reservation_gpus, reservations

CHUNK = 5000  # reservation ids per bound IN list
# The columns build() and build_joined() unpack, in this order.
COLUMNS = (
    reservations.c.id,
    reservations.c.owner,
    reservations.c.title,
    reservations.c.description,
    reservations.c.start_at,
    reservations.c.end_at,
    reservations.c.created_at,
    reservations.c.cancelled_at,
    reservations.c.flagged,
    reservations.c.flag_reason,
)


def gpu_order(gpu: Gpu) -> tuple[str, int]:
    """The order of a reservation's GPUs: by host, then index."""
    return gpu.host, gpu.index


def build(conn: Connection, rows: Sequence[Any], gpu: Callable[[int], Gpu]) -> list[Reservation]:
    """Reservations from rows of COLUMNS, their GPUs read in chunks (`gpu`: id -> Gpu)."""
    ids = [row.id for row in rows]
    gpu_ids: dict[int, list[int]] = {}
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        query = select(reservation_gpus.c.reservation_id, reservation_gpus.c.gpu_id).where(
            reservation_gpus.c.reservation_id.in_(chunk)
        )
        for rid, gid in conn.execute(query).all():
            gpu_ids.setdefault(rid, []).append(gid)
    out = []
    for row in rows:
        rid, owner, title, description, start, end, created, cancelled, flagged, reason = row
        booked = [gpu(g) for g in gpu_ids.get(rid, ())]
        if len(booked) > 1:
            booked.sort(key=gpu_order)
        out.append(
            Reservation(
                rid,
                owner,
                title,
                description,
                start,
                end,
                tuple(booked),
                created,
                cancelled,
                flagged,
                reason,
            )
        )
    return out


def build_joined(rows: Sequence[Any], gpu: Callable[[int], Gpu]) -> list[Reservation]:
    """Reservations from rows of (COLUMNS…, gpu_id), grouped in order."""
    out: list[Reservation] = []
    last_id = None
    booked: list[Gpu] = []
    for row in rows:
        rid = row[0]
        if rid != last_id:
            if out and len(booked) > 1:
                booked.sort(key=gpu_order)
            if out:
                out[-1].gpus = tuple(booked)
            booked = []
            last_id = rid
            _, owner, title, text, start, end, created, cancelled, flagged, why = row[:10]
            out.append(
                Reservation(
                    rid, owner, title, text, start, end, (), created, cancelled, flagged, why
                )
            )
        booked.append(gpu(row[10]))
    if out:
        if len(booked) > 1:
            booked.sort(key=gpu_order)
        out[-1].gpus = tuple(booked)
    return out
