"""Tables of the inventory, users, reservations, access rules and usage (migrations 0001, 0002,
0010, 0013, 0014, 0018, 0022, 0024)."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    false,
    text,
)

from .base import UTCDateTime, metadata

hosts = Table(
    "hosts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("address", String(255), nullable=False),
    Column("port", Integer, nullable=False),
    Column("username", String(64)),
    Column("transport", String(16), nullable=False),
    Column("declared", Boolean, nullable=False, default=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("last_seen_at", UTCDateTime),
)

# Bookable units: physical GPUs (parent_id NULL) and their MIG slices (migration 0010). A slice is
# known by (parent, GI, CI, profile); a re-partition that removes it sets removed_at (its old
# reservations still point at it), one that brings it back clears it.
gpus = Table(
    "gpus",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("host_id", Integer, ForeignKey("hosts.id", ondelete="CASCADE"), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("uuid", String(96), nullable=False, unique=True),
    Column("model", String(128)),
    Column("memory_mib", Integer),
    Column("parent_id", Integer, ForeignKey("gpus.id")),
    Column("gpu_instance_id", Integer),
    Column("compute_instance_id", Integer),
    Column("profile", String(32)),
    Column("removed_at", UTCDateTime),
    # bookings may hold shares of it (hosts config; migration 0022)
    Column("shareable", Boolean, nullable=False, server_default=false()),
    Index(
        "uq_gpus_host_id_idx",
        "host_id",
        "idx",
        unique=True,
        sqlite_where=text("parent_id IS NULL"),
        postgresql_where=text("parent_id IS NULL"),
    ),
    Index(None, "parent_id"),
)

users = Table(
    "users",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("first_seen_at", UTCDateTime, nullable=False),
    Column("last_seen_at", UTCDateTime, nullable=False),
)

user_groups = Table(
    "user_groups",
    metadata,
    Column("user_name", String(128), ForeignKey("users.name", ondelete="CASCADE"), nullable=False),
    Column("group_name", String(128), nullable=False),
    PrimaryKeyConstraint("user_name", "group_name"),
)

reservations = Table(
    "reservations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("title", String(200), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("start_at", UTCDateTime, nullable=False),
    Column("end_at", UTCDateTime, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("cancelled_at", UTCDateTime),
    Column("flagged", Boolean, nullable=False, default=False),
    Column("flag_reason", Text),
    # set while it waits for approval: when its hold runs out (migration 0024)
    Column("tentative_until", UTCDateTime),
    Index(None, "start_at"),
    Index(None, "owner", "start_at"),
    # a user's live reservations by end: the fair-share check counts those not ended
    # (migration 0014) from the index alone
    Index(
        "ix_reservations_live_by_owner",
        "owner",
        "end_at",
        sqlite_where=text("cancelled_at IS NULL"),
        postgresql_where=text("cancelled_at IS NULL"),
    ),
    # the tentative ones by the end of their hold (migration 0024)
    Index(
        "ix_reservations_tentative",
        "tentative_until",
        sqlite_where=text("tentative_until IS NOT NULL"),
        postgresql_where=text("tentative_until IS NOT NULL"),
    ),
    sqlite_autoincrement=True,  # ids are never reused (migration 0006)
)

# A booking that needed approval: why, when asked, and the answer (migration 0024).
reservation_approvals = Table(
    "reservation_approvals",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("why", Text, nullable=False),
    Column("asked_at", UTCDateTime, nullable=False),
    Column("outcome", String(16)),  # approved, declined, expired; NULL: not answered yet
    Column("decided_by", String(128)),
    Column("decided_at", UTCDateTime),
    Column("note", Text),
    CheckConstraint(
        "outcome IS NULL OR outcome IN ('approved', 'declined', 'expired')",
        name="reservation_approvals_outcome",
    ),
)

# One row per booked GPU; start/end/cancelled are copies of the reservation's so that the
# database itself can refuse overlaps (PostgreSQL: exclusion constraint; SQLite: triggers).
reservation_gpus = Table(
    "reservation_gpus",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("gpu_id", Integer, ForeignKey("gpus.id"), nullable=False),
    # The physical GPU of the booked unit (gpu_id itself, or a slice's parent): a whole GPU
    # conflicts with its slices through it (migration 0010).
    Column("device_id", Integer, ForeignKey("gpus.id"), nullable=False),
    Column("start_at", UTCDateTime, nullable=False),
    Column("end_at", UTCDateTime, nullable=False),
    Column("cancelled", Boolean, nullable=False, default=False),
    # The share of the unit it holds, in millionths (model/shares.py): 1000000 is all of it.
    # The shares live on one GPU add up to at most 1000000 at every instant (migration 0022).
    Column("share_ppm", Integer, nullable=False, server_default="1000000"),
    CheckConstraint("share_ppm > 0 AND share_ppm <= 1000000", name="reservation_gpus_share_range"),
    PrimaryKeyConstraint("reservation_id", "gpu_id"),
    Index(None, "gpu_id", "start_at"),
    Index(None, "device_id", "start_at"),
    # the earliest-slot search reads every booked span of a window from it alone (0012)
    Index("ix_reservation_gpus_span", "start_at", "end_at", "gpu_id", "device_id", "cancelled"),
    # each unit's live bookings by start: the current and the next holder of a GPU are one
    # index probe each, however many bookings there are (migration 0018)
    Index(
        "ix_reservation_gpus_live",
        "gpu_id",
        "start_at",
        sqlite_where=text("cancelled = 0"),  # as SQLAlchemy writes NOT cancelled there
        postgresql_where=text("NOT cancelled"),
    ),
    # each device's live rows by end: the share checks read those that end after a booking
    # starts (migration 0022)
    Index(
        "ix_reservation_gpus_device_end",
        "device_id",
        "end_at",
        sqlite_where=text("cancelled = 0"),
        postgresql_where=text("NOT cancelled"),
    ),
)

# Single-row bookkeeping: the longest reservation ever stored bounds window queries.
reservation_stats = Table(
    "reservation_stats",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("longest_seconds", Integer, nullable=False),
)

rules = Table(
    "rules",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(120), nullable=False, default=""),
    Column("spec", Text, nullable=False),
    Column("valid_from", Date),
    Column("valid_until", Date),
    Column("created_by", String(128), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    sqlite_autoincrement=True,
)

# Running aggregates of what a reservation's GPUs did while it was active.
reservation_usage = Table(
    "reservation_usage",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("gpu_id", Integer, ForeignKey("gpus.id"), nullable=False),
    Column("samples", Integer, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("busy_seconds", Float, nullable=False),
    Column("util_sum", Float),  # NULL: the driver reported no utilisation (0013)
    Column("util_max", Float),
    Column("util_samples", Integer, nullable=False, server_default="0"),  # those that had one
    Column("mem_sum_mib", Float),  # NULL: the driver reported no memory use (0016)
    Column("mem_samples", Integer, nullable=False, server_default="0"),  # those that had one
    Column("foreign_seconds", Float, nullable=False),
    Column("first_at", UTCDateTime, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("reservation_id", "gpu_id"),
)

# Hourly usage per GPU and process owner ('' when no process ran).
gpu_usage_hourly = Table(
    "gpu_usage_hourly",
    metadata,
    Column("gpu_id", Integer, ForeignKey("gpus.id"), nullable=False),
    Column("hour", UTCDateTime, nullable=False),
    Column("user_name", String(128), nullable=False),
    Column("samples", Integer, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("busy_seconds", Float, nullable=False),
    Column("util_sum", Float),  # NULL: the driver reported no utilisation (0013)
    Column("util_max", Float),
    Column("util_samples", Integer, nullable=False, server_default="0"),  # those that had one
    Column("mem_sum_mib", Float),  # NULL: the driver reported no memory use (0016)
    Column("mem_samples", Integer, nullable=False, server_default="0"),  # those that had one
    PrimaryKeyConstraint("gpu_id", "hour", "user_name"),
    Index(None, "hour"),
)
