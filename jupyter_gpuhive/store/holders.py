"""Who holds each GPU now and who holds it next: two index probes per unit, whatever the
number of bookings (`ix_reservation_gpus_live`, migration 0018); and the shares held of each
shared GPU now (#44), from the live rows that end after now (`ix_reservation_gpus_device_end`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, not_, select

from ..model import Reservation
from ..model.shares import WHOLE
from .database import Database
from .reservationrows import COLUMNS
from .schema import UTCDateTime, gpus, reservation_gpus, reservations

Holders = dict[int, tuple[Reservation | None, Reservation | None]]
Shares = dict[int, list[Reservation]]  # unit id -> the shares held of it now, by start


def _pairs() -> Any:
    """(unit, current reservation id, next reservation id) of every unit, two index probes
    each; parameters `now` and `horizon`."""
    rg = reservation_gpus
    now, horizon = bindparam("now", type_=UTCDateTime), bindparam("horizon", type_=UTCDateTime)

    def probe(when: Any, order: Any) -> Any:
        # Whole bookings of one unit never overlap, so no two start together: `order` alone
        # is total (a second sort key made SQLite sort every booking of the window). Shares
        # of a unit overlap: `shares_now` reads them.
        return (
            select(rg.c.reservation_id)
            .where(rg.c.gpu_id == gpus.c.id, not_(rg.c.cancelled), when)
            .order_by(order)
            .limit(1)
            .scalar_subquery()
        )

    # The last one begun is the only one that may still run.
    current = probe(rg.c.start_at <= now, rg.c.start_at.desc())
    following = probe(and_(rg.c.start_at > now, rg.c.start_at < horizon), rg.c.start_at)
    return select(gpus.c.id, current, following)


class HolderReads:
    """Each unit's current and next live reservation (GET hosts)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pairs = _pairs()  # built once: building it cost more than running it

    def at(self, now: datetime, horizon: datetime) -> Holders:
        """{unit id: (reservation holding it at `now`, the first one starting after `now` and
        before `horizon`)} for the units that have either. The reservations' `gpus` are not
        read (empty): the caller knows the unit. A unit held in shares: its first share."""
        return self.at_with_shares(now, horizon)[0]

    def at_with_shares(self, now: datetime, horizon: datetime) -> tuple[Holders, Shares]:
        """`at`, and the shares held of each unit at `now` (their share_ppm set), in one read."""
        with self.db.read() as conn:
            shares: Shares = {}
            for row in conn.execute(_SHARES_NOW, {"now": now}):
                part = _reservation(row[:-2])
                part.share_ppm = row[-1]
                shares.setdefault(row[-2], []).append(part)
            pairs = [
                (unit, cur, nxt)
                for unit, cur, nxt in conn.execute(self._pairs, {"now": now, "horizon": horizon})
                if cur is not None or nxt is not None
            ]
            ids = sorted({r for _, cur, nxt in pairs for r in (cur, nxt) if r is not None})
            found = {
                row[0]: _reservation(row)
                for row in conn.execute(select(*COLUMNS).where(reservations.c.id.in_(ids)))
            }
        out: Holders = {unit: (parts[0], None) for unit, parts in shares.items()}
        for unit, cur, nxt in pairs:
            held = found.get(cur) if cur is not None else None
            if held is not None and held.end <= now:
                held = None  # the last one begun has ended (shares: those still held)
            if unit in shares:
                held = shares[unit][0]
            coming = found.get(nxt) if nxt is not None else None
            if held is not None or coming is not None:
                out[unit] = (held, coming)
        return out, shares


_rg = reservation_gpus
_SHARES_NOW = (
    select(*COLUMNS, _rg.c.gpu_id, _rg.c.share_ppm)
    .join(_rg, _rg.c.reservation_id == reservations.c.id)
    .where(
        _rg.c.share_ppm < WHOLE,
        not_(_rg.c.cancelled),
        _rg.c.end_at > bindparam("now", type_=UTCDateTime),
        _rg.c.start_at <= bindparam("now", type_=UTCDateTime),
    )
    .order_by(_rg.c.start_at, _rg.c.reservation_id)
)


def _reservation(row: Sequence[Any]) -> Reservation:
    """A Reservation from COLUMNS' values, its GPUs not read."""
    rid, owner, title, description, start, end, created, cancelled, flagged, reason, until = row
    return Reservation(
        rid, owner, title, description, start, end, (), created, cancelled, flagged, reason,
        tentative_until=until,
    )  # fmt: skip
