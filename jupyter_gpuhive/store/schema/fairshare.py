"""Fair share (migration 0008): stored limits and tiers, and the accounting of GPU time.

Accounting rows are what each GPU did, charged to whom: per GPU, hour (and month), payer
and kind ('reserved': within a reservation, charged to its holder; 'queued': a queued job
outside reservations; 'job': another gpuhive job outside reservations; 'unreserved': other
processes nobody reserved for; 'idle': nothing ran and nobody held it, payer '').
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, PrimaryKeyConstraint, String, Table, Text

from .base import UTCDateTime, metadata

# One row per scope: ('default', ''), ('group', NAME), ('user', NAME), ('tiers', '');
# `spec` is the JSON of the limits (or of the list of tiers).
booking_limits = Table(
    "booking_limits",
    metadata,
    Column("scope", String(8), nullable=False),
    Column("name", String(128), nullable=False),
    Column("spec", Text, nullable=False),
    Column("updated_by", String(128), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("scope", "name"),
)


def _charge_columns() -> list[Column[float]]:
    return [
        Column("seconds", Float, nullable=False),  # measured time
        Column("used_seconds", Float, nullable=False),  # busy: a process, or load
        Column("util_seconds", Float, nullable=False),  # seconds × utilisation
        Column("energy_j", Float, nullable=False),  # integrated power draw
        Column("unmetered_seconds", Float, nullable=False),  # measured, but no power reading
        # measured, but no utilisation reported (0016)
        Column("unrated_seconds", Float, nullable=False, server_default="0"),
    ]


gpu_charges_hourly = Table(
    "gpu_charges_hourly",
    metadata,
    Column("gpu_id", Integer, nullable=False),
    Column("hour", UTCDateTime, nullable=False),
    Column("payer", String(128), nullable=False),
    Column("kind", String(12), nullable=False),
    *_charge_columns(),
    PrimaryKeyConstraint("gpu_id", "hour", "payer", "kind"),
    Index(None, "payer", "hour"),
    Index(None, "hour"),
)

gpu_charges_monthly = Table(
    "gpu_charges_monthly",
    metadata,
    Column("gpu_id", Integer, nullable=False),
    Column("month", UTCDateTime, nullable=False),
    Column("payer", String(128), nullable=False),
    Column("kind", String(12), nullable=False),
    *_charge_columns(),
    PrimaryKeyConstraint("gpu_id", "month", "payer", "kind"),
    Index(None, "month"),
)

# Totals per reservation or job ('reservation' | 'job', id) over its whole life.
charge_totals = Table(
    "charge_totals",
    metadata,
    Column("subject", String(12), nullable=False),
    Column("subject_id", Integer, nullable=False),
    *_charge_columns(),
    PrimaryKeyConstraint("subject", "subject_id"),
)


# What a host group's administrators set for their hosts (migration 0025): the limits of
# each user's bookings there (`limits`, the JSON of one entry; NULL: none), and the no-show
# times there (NULL: the site's; 0: no-shows not watched there).
host_group_settings = Table(
    "host_group_settings",
    metadata,
    Column("group_name", String(128), primary_key=True),
    Column("limits", Text),
    Column("noshow_after_s", Float),
    Column("noshow_release_after_s", Float),
    Column("updated_by", String(128), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)
