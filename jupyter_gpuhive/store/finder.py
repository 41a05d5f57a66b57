"""What the earliest-slot finder reads: every live booking span in a window, in one statement,
and the GPUs that running queued jobs hold."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from ..model.jobs import ACTIVE
from .database import Database
from .schema import job_tasks, jobs, reservation_gpus, reservation_stats

_rg = reservation_gpus
# Epoch seconds computed by the database (start rounded down, end up), read through the driver's
# own cursor: converting and wrapping tens of thousands of timestamps was most of a search.
_WHERE = "start_at < {until} AND start_at > {earliest} AND end_at > {since} AND NOT cancelled"
_SPANS = {
    "sqlite": (
        "SELECT gpu_id, device_id, CAST(strftime('%s', start_at) AS INTEGER), "
        "CAST(strftime('%s', end_at) AS INTEGER) + (substr(end_at, 21, 6) <> '000000') "
        "FROM reservation_gpus WHERE " + _WHERE.format(until="?", earliest="?", since="?")
    ),
    "postgresql": (
        "SELECT gpu_id, device_id, CAST(floor(extract(epoch FROM start_at)) AS BIGINT), "
        "CAST(ceil(extract(epoch FROM end_at)) AS BIGINT) FROM reservation_gpus WHERE "
        + _WHERE.format(until="%(until)s", earliest="%(earliest)s", since="%(since)s")
    ),
}


def _sqlite_instant(instant: datetime) -> str:
    """An instant as the SQLite store writes it (fixed-width ISO text: text order is time order)."""
    return instant.astimezone(UTC).isoformat(sep=" ", timespec="microseconds")


_j, _t = jobs, job_tasks
_RUNNING = (
    select(_j.c.id, _j.c.walltime_s, _j.c.stop_at, _t.c.gpus, _t.c.started_at)
    .join(_t, _t.c.job_id == _j.c.id)
    .where(_j.c.queued.is_(True), _t.c.state.in_([str(s) for s in ACTIVE]))
)

Row = tuple[int, int, int, int]  # unit id, GPU id (the slice's parent), start, end (epoch s)


class FinderReads:
    """The finder's bulk reads."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def spans(
        self, since: datetime, until: datetime, devices: Collection[int] | None = None
    ) -> list[Row]:
        """(unit id, GPU id, start, end) of every live booked unit overlapping [since, until);
        instants rounded outwards to whole seconds."""
        with self.db.read() as conn:
            longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
            earliest = since - timedelta(seconds=longest + 1)  # bounds the index range
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                query = _SPANS[conn.dialect.name]
                chosen = sorted(devices) if devices is not None else None
                if conn.dialect.name == "sqlite":
                    args: Any = tuple(map(_sqlite_instant, (until, earliest, since)))
                    if chosen is not None:  # only the GPUs that matter (an IN list of ids)
                        query += f" AND device_id IN ({','.join('?' * len(chosen)) or 'NULL'})"
                        args += tuple(chosen)
                else:
                    args = {"since": since, "until": until, "earliest": earliest}
                    if chosen is not None:
                        query += " AND device_id = ANY(%(devices)s)"
                        args["devices"] = chosen
                cursor.execute(query, args)
                rows = cursor.fetchall()
            finally:
                cursor.close()
        return [(u, d, int(a), int(b)) for u, d, a, b in rows]

    def share_loads(
        self, since: datetime, until: datetime, devices: Collection[int]
    ) -> list[tuple[int, int, int, int, int]]:
        """(unit id, GPU id, start, end, millionths of the unit) of every live booking on
        `devices` overlapping [since, until); instants rounded outwards to whole seconds."""
        rg = reservation_gpus
        with self.db.read() as conn:
            longest = conn.execute(select(reservation_stats.c.longest_seconds)).scalar() or 0
            rows = conn.execute(
                select(
                    rg.c.gpu_id, rg.c.device_id, rg.c.start_at, rg.c.end_at, rg.c.share_ppm
                ).where(
                    rg.c.device_id.in_(sorted(devices)),
                    rg.c.cancelled.is_(False),
                    rg.c.start_at < until,
                    rg.c.end_at > since,
                    rg.c.start_at > since - timedelta(seconds=longest + 1),
                )
            ).all()
        return [(u, d, int(a.timestamp()), -int(-b.timestamp() // 1), s) for u, d, a, b, s in rows]

    def running_claims(
        self, now: datetime, default_walltime: timedelta | None
    ) -> list[tuple[str, int, int | None, int]]:
        """(GPU or MIG UUID, job id, end or None: no known end, start) of each unit a running
        queued job holds: from its start to its walltime's end (or its stop time)."""
        with self.db.read() as conn:
            rows = conn.execute(_RUNNING).all()
        out = []
        for job_id, walltime_s, stop_at, gpus, started in rows:
            ends = []
            if stop_at is not None:
                ends.append(stop_at)
            walltime = timedelta(seconds=walltime_s) if walltime_s else default_walltime
            if walltime is not None and started is not None:
                ends.append(started + walltime)
            end = int(max(min(ends), now).timestamp()) + 1 if ends else None
            begin = int((started or now).timestamp())
            for uuid in json.loads(gpus or "[]"):
                out.append((str(uuid), int(job_id), end, begin))
        return out
