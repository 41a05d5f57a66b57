"""Roll-ups of the accounting report (migration 0011).

Charges per month and payer, and per month and host, are added to by every sweep in the
transaction that writes the hourly charges, so a year's report reads a few rows per user and
host instead of one per GPU. GPU-hours booked per month (an instant span: a site-local month)
are kept per owner and per host once the month has ended; triggers on the reservations delete
a cached month when a reservation within it changes, and the next report computes it again.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, PrimaryKeyConstraint, String, Table

from .base import UTCDateTime, metadata
from .fairshare import _charge_columns

payer_charges_monthly = Table(
    "payer_charges_monthly",
    metadata,
    Column("month", UTCDateTime, nullable=False),
    Column("payer", String(128), nullable=False),
    Column("kind", String(12), nullable=False),
    *_charge_columns(),
    PrimaryKeyConstraint("month", "payer", "kind"),
)

host_charges_monthly = Table(
    "host_charges_monthly",
    metadata,
    Column("month", UTCDateTime, nullable=False),
    Column("host_id", Integer, nullable=False),
    Column("kind", String(12), nullable=False),
    *_charge_columns(),
    PrimaryKeyConstraint("month", "host_id", "kind"),
)

# Seconds booked in [start_at, end_at): rows per owner (host_id 0) and per host (owner ''),
# and one marker row ('', 0) saying the span is complete. Indexed by end_at: the triggers
# look for spans that end after a changed reservation starts (none, for future bookings).
reserved_monthly = Table(
    "reserved_monthly",
    metadata,
    Column("start_at", UTCDateTime, nullable=False),
    Column("end_at", UTCDateTime, nullable=False),
    Column("owner", String(128), nullable=False),
    Column("host_id", Integer, nullable=False),
    Column("seconds", Float, nullable=False),
    PrimaryKeyConstraint("start_at", "end_at", "owner", "host_id"),
    Index(None, "end_at"),
)
