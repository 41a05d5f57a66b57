"""Rows of the reservations and reservation_gpus tables: a booking's rows inserted, and rows
read back as the model's Reservation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Integer, column, insert, literal, select, true, values

from ..model import Gpu, Reservation
from ..model.shares import WHOLE
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
    reservations.c.tentative_until,
)


def gpu_order(gpu: Gpu) -> tuple[str, int]:
    """The order of a reservation's GPUs: by host, then index."""
    return gpu.host, gpu.index


def build(conn: Connection, rows: Sequence[Any], gpu: Callable[[int], Gpu]) -> list[Reservation]:
    """Reservations from rows of COLUMNS, their GPUs read in chunks (`gpu`: id -> Gpu)."""
    ids = [row.id for row in rows]
    gpu_ids: dict[int, list[int]] = {}
    shares: dict[int, int] = {}
    rg = reservation_gpus
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        query = select(rg.c.reservation_id, rg.c.gpu_id, rg.c.share_ppm).where(
            rg.c.reservation_id.in_(chunk)
        )
        for rid, gid, share in conn.execute(query).all():
            gpu_ids.setdefault(rid, []).append(gid)
            shares[rid] = min(share, shares.get(rid, WHOLE))
    out = []
    for row in rows:
        rid, owner, title, description, start, end, created, cancelled, flagged, reason, until = row
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
                shares.get(rid, WHOLE),
                until,
            )
        )
    return out


def build_joined(rows: Sequence[Any], gpu: Callable[[int], Gpu]) -> list[Reservation]:
    """Reservations from rows of (COLUMNS…, gpu_id, share_ppm), grouped in order."""
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
            _, owner, title, text, start, end, created, cancelled, flagged, why, until = row[:11]
            out.append(
                Reservation(
                    rid, owner, title, text, start, end, (), created, cancelled, flagged, why,
                    row[12], until,
                )
            )  # fmt: skip
        booked.append(gpu(row[11]))
    if out:
        if len(booked) > 1:
            booked.sort(key=gpu_order)
        out[-1].gpus = tuple(booked)
    return out


def insert_booking(
    conn: Connection, row: dict[str, Any], units: list[tuple[int, int]], share: int = WHOLE
) -> int:
    """Insert a reservation and its units' rows (unit id, device id), each holding `share`
    millionths of its unit; its id. PostgreSQL: one statement (the reservation's INSERT in a
    WITH), a round trip less in every booking."""
    made = insert(reservations).values(**row)
    start, end = row["start_at"], row["end_at"]
    if conn.dialect.name != "postgresql":
        rid = int(conn.execute(made).inserted_primary_key[0])  # type: ignore[index]
        conn.execute(
            insert(reservation_gpus),
            [
                {
                    "reservation_id": rid,
                    "gpu_id": gid,
                    "device_id": device,
                    "start_at": start,
                    "end_at": end,
                    "cancelled": False,
                    "share_ppm": share,
                }
                for gid, device in units
            ],
        )
        return rid
    rg = reservation_gpus
    new = made.returning(reservations.c.id).cte("new_reservation")
    chosen = values(column("gpu_id", Integer), column("device_id", Integer), name="units").data(
        units
    )
    rows = select(
        new.c.id,
        chosen.c.gpu_id,
        chosen.c.device_id,
        literal(start, rg.c.start_at.type),
        literal(end, rg.c.end_at.type),
        literal(False),
        literal(share),
    ).select_from(new.join(chosen, true()))
    columns = [
        "reservation_id", "gpu_id", "device_id", "start_at", "end_at", "cancelled", "share_ppm"
    ]  # fmt: skip
    both = insert(rg).from_select(columns, rows).add_cte(new).returning(rg.c.reservation_id)
    return int(conn.execute(both).scalars().first())  # type: ignore[arg-type]
