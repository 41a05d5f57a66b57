"""Usage statistics: running aggregates per reservation, and hourly per GPU and user."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, and_, func, select
from sqlalchemy.dialects import postgresql, sqlite

from ..model import Reservation
from ..model.activity import gpu_busy
from .database import Database
from .schema import gpu_usage_hourly, reservation_usage

NOT_REPORTED = "not reported"  # the label of a utilisation the driver does not report


@dataclass(frozen=True)
class GpuReading:
    """What one GPU did during one sample interval."""

    gpu_id: int
    seconds: float
    util: float | None
    mem_used_mib: float | None
    owners: frozenset[str]
    hourly: bool = True  # False for a MIG slice: the hourly table counts physical GPUs only

    @property
    def busy(self) -> bool:
        """Known busy (model.activity): a process on it, or utilisation of at least 5%."""
        return gpu_busy(bool(self.owners), self.util) is True


def _values(r: GpuReading, **key: Any) -> dict[str, Any]:
    """One reading as the aggregate columns of a first sample (utilisation NULL where the
    driver reports none, as for MIG slices: never 0)."""
    util = None if r.util is None else float(r.util)
    return {
        **key,
        "samples": 1,
        "seconds": r.seconds,
        "busy_seconds": r.seconds if r.busy else 0.0,
        "util_sum": util,
        "util_max": util,
        "util_samples": 0 if util is None else 1,
        "mem_sum_mib": None if r.mem_used_mib is None else float(r.mem_used_mib),
        "mem_samples": 0 if r.mem_used_mib is None else 1,
    }


def _upsert(conn: Connection, table: Table, keys: Sequence[str], rows: list[dict[str, Any]],
            keep: Sequence[str] = ()) -> None:  # fmt: skip
    """Insert rows, or add them to the existing aggregates: one statement for all rows."""
    if not rows:
        return
    dialect = conn.dialect.name
    insert_ = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert_(table)
    new, old = stmt.excluded, table.c
    larger = func.greatest if dialect == "postgresql" else func.max
    summed = ("samples", "seconds", "busy_seconds", "util_samples", "mem_samples",
              "foreign_seconds")  # fmt: skip
    update: dict[str, Any] = {c: old[c] + new[c] for c in summed if c in table.c}
    # NULL (not reported) + x = x; NULL only while no sample had a utilisation
    update["util_sum"] = func.coalesce(old.util_sum + new.util_sum, old.util_sum, new.util_sum)
    update["mem_sum_mib"] = func.coalesce(
        old.mem_sum_mib + new.mem_sum_mib, old.mem_sum_mib, new.mem_sum_mib
    )
    update["util_max"] = larger(
        func.coalesce(old.util_max, new.util_max), func.coalesce(new.util_max, old.util_max)
    )
    update.update(
        {
            c: new[c]
            for c in (col.name for col in table.columns)
            if c not in (*keys, *summed, "util_sum", "util_max", "mem_sum_mib", *keep)
        }
    )
    conn.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=update), rows)


def _summary(row: Any) -> dict[str, Any]:
    samples = row.samples or 0
    rated = row.util_samples or 0
    memory = row.mem_samples or 0
    return {
        "samples": samples,
        "observed_hours": round((row.seconds or 0) / 3600, 4),
        "used_gpu_hours": round((row.busy_seconds or 0) / 3600, 4),
        "mean_util": round(row.util_sum / rated, 1) if rated else None,
        "max_util": row.util_max if rated else None,
        **_label(samples, rated),
        "mean_mem_mib": round(row.mem_sum_mib / memory, 1) if memory else None,
        **({"mem_label": NOT_REPORTED} if samples and not memory else {}),
    }


def _label(samples: int, rated: int) -> dict[str, Any]:
    """`util_label: "not reported"` where samples came but none had a utilisation."""
    return {"util_label": NOT_REPORTED} if samples and not rated else {}


class Usage:
    """Records what GPUs did each sweep, and answers usage questions."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self, at: datetime, readings: Sequence[GpuReading], active: Sequence[Reservation]
    ) -> None:
        """Add one sweep's readings to the hourly table and to active reservations."""
        hour = at.replace(minute=0, second=0, microsecond=0)
        by_gpu = {r.gpu_id: r for r in readings}

        hourly = [
            _values(r, gpu_id=r.gpu_id, hour=hour, user_name=owner)
            for r in readings
            if r.hourly
            for owner in (sorted(r.owners) or [""])
        ]
        per_reservation = []
        for res in active:
            for gpu in res.gpus:
                reading = by_gpu.get(gpu.id)
                if reading is None:
                    continue
                foreign = reading.seconds if reading.owners - {res.owner} else 0.0
                per_reservation.append(
                    _values(reading, reservation_id=res.id, gpu_id=gpu.id,
                            foreign_seconds=foreign, first_at=at, last_at=at)
                )  # fmt: skip

        def work(conn: Connection) -> None:
            _upsert(conn, gpu_usage_hourly, ("gpu_id", "hour", "user_name"), hourly)
            _upsert(
                conn, reservation_usage, ("reservation_id", "gpu_id"), per_reservation,
                keep=("first_at",),
            )  # fmt: skip

        if readings:
            self.db.write(work)

    def for_reservation(self, reservation: Reservation) -> dict[str, Any]:
        """Per-GPU and total usage of one reservation (live while it runs)."""
        ru = reservation_usage
        with self.db.read() as conn:
            rows = conn.execute(select(ru).where(ru.c.reservation_id == reservation.id)).all()
        by_gpu = {row.gpu_id: row for row in rows}
        reserved_h = (reservation.end - reservation.start).total_seconds() / 3600
        gpus = []
        for gpu in reservation.gpus:
            row = by_gpu.get(gpu.id)
            entry: dict[str, Any] = {"gpu": gpu.ref, "uuid": gpu.uuid}
            if row is not None:
                entry.update(_summary(row))
                entry["foreign_hours"] = round(row.foreign_seconds / 3600, 4)
                entry["last_sample"] = row.last_at.isoformat()
            else:
                entry.update({"samples": 0, "used_gpu_hours": 0.0, "mean_util": None})
            gpus.append(entry)
        samples = sum(r.samples for r in rows)
        rated = sum(r.util_samples for r in rows)
        util_sum = sum(r.util_sum for r in rows if r.util_sum is not None)
        return {
            "reservation": reservation.id,
            # a share counts its part: a quarter GPU for 4 h is 1 GPU-hour
            "reserved_gpu_hours": round(reserved_h * len(reservation.gpus) * reservation.share, 4),
            "used_gpu_hours": round(sum(r.busy_seconds for r in rows) / 3600, 4),
            "mean_util": round(util_sum / rated, 1) if rated else None,
            "max_util": max((r.util_max for r in rows if r.util_max is not None), default=None),
            **_label(samples, rated),
            "gpus": gpus,
        }

    def window(self, start: datetime, end: datetime) -> dict[str, list[Any]]:
        """Hourly usage in [start, end) summed per GPU id and per user name."""
        h = gpu_usage_hourly
        cols = (
            func.sum(h.c.samples).label("samples"),
            func.sum(h.c.seconds).label("seconds"),
            func.sum(h.c.busy_seconds).label("busy_seconds"),
            func.sum(h.c.util_sum).label("util_sum"),
            func.max(h.c.util_max).label("util_max"),
            func.sum(h.c.mem_sum_mib).label("mem_sum_mib"),
            func.sum(h.c.util_samples).label("util_samples"),
            func.sum(h.c.mem_samples).label("mem_samples"),
        )
        span = and_(h.c.hour >= start.replace(minute=0, second=0, microsecond=0), h.c.hour < end)
        with self.db.read() as conn:
            by_gpu = conn.execute(select(h.c.gpu_id, *cols).where(span).group_by(h.c.gpu_id)).all()
            by_user = conn.execute(
                select(h.c.user_name, *cols)
                .where(span, h.c.user_name != "")
                .group_by(h.c.user_name)
            ).all()
        return {
            "gpus": [(row.gpu_id, _summary(row)) for row in by_gpu],
            "users": [(row.user_name, _summary(row)) for row in by_user],
        }

    def by_reservation(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Summed usage of several reservations over all their GPUs."""
        ru = reservation_usage
        cols = (
            func.sum(ru.c.samples).label("samples"),
            func.sum(ru.c.seconds).label("seconds"),
            func.sum(ru.c.busy_seconds).label("busy_seconds"),
            func.sum(ru.c.util_sum).label("util_sum"),
            func.max(ru.c.util_max).label("util_max"),
            func.sum(ru.c.mem_sum_mib).label("mem_sum_mib"),
            func.sum(ru.c.util_samples).label("util_samples"),
            func.sum(ru.c.mem_samples).label("mem_samples"),
        )
        out: dict[int, dict[str, Any]] = {}
        with self.db.read() as conn:
            for i in range(0, len(ids), 5000):
                query = (
                    select(ru.c.reservation_id, *cols)
                    .where(ru.c.reservation_id.in_(list(ids[i : i + 5000])))
                    .group_by(ru.c.reservation_id)
                )
                for row in conn.execute(query).all():
                    out[row.reservation_id] = _summary(row)
        return out
