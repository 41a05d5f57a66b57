"""The relational schema (SQLAlchemy Core); Alembic migrations create it, a test compares."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from ..model import UTC

# The largest id any table can hold (INTEGER on PostgreSQL); a larger id names nothing.
ID_MAX = 2**31 - 1

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC instants on every backend.

    PostgreSQL: timestamptz. SQLite: fixed-width ISO text with '+00:00', so that text order
    is time order (the overlap triggers compare it) and reading is one fromisoformat call.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(32))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime reached the store")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.isoformat(sep=" ", timespec="microseconds")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            return datetime.fromisoformat(value)
        return value if value.utcoffset() == _ZERO else value.astimezone(UTC)


_ZERO = timedelta(0)


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

gpus = Table(
    "gpus",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("host_id", Integer, ForeignKey("hosts.id", ondelete="CASCADE"), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("uuid", String(96), nullable=False, unique=True),
    Column("model", String(128)),
    Column("memory_mib", Integer),
    UniqueConstraint("host_id", "idx"),
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
    Index(None, "start_at"),
    Index(None, "owner", "start_at"),
    sqlite_autoincrement=True,  # ids are never reused (migration 0006)
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
    Column("start_at", UTCDateTime, nullable=False),
    Column("end_at", UTCDateTime, nullable=False),
    Column("cancelled", Boolean, nullable=False, default=False),
    PrimaryKeyConstraint("reservation_id", "gpu_id"),
    Index(None, "gpu_id", "start_at"),
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
    Column("util_sum", Float, nullable=False),
    Column("util_max", Float, nullable=False),
    Column("mem_sum_mib", Float, nullable=False),
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
    Column("util_sum", Float, nullable=False),
    Column("util_max", Float, nullable=False),
    Column("mem_sum_mib", Float, nullable=False),
    PrimaryKeyConstraint("gpu_id", "hour", "user_name"),
    Index(None, "hour"),
)

# --- Integrations (migration 0007): calendar feeds and webhooks -------------------------

# A secret feed URL: only the SHA-256 of its token is kept. kind 'user' (one per owner) or
# 'site' (an admin's opt-in feed of all reservations, or of one host's).
feed_tokens = Table(
    "feed_tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("owner", String(128), nullable=False),
    Column("host", String(128)),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("hint", String(8), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index(None, "kind", "owner"),
    sqlite_autoincrement=True,
)

# Per reservation: its calendar UID (random) and SEQUENCE, bumped whenever what a calendar
# shows of it (its fingerprint) changes.
calendar_events = Table(
    "calendar_events",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("uid", String(64), nullable=False, unique=True),
    Column("sequence", Integer, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("changed_at", UTCDateTime, nullable=False),
)

# Webhook endpoints: a user's own (their own events) or, made by an admin, the site's.
webhooks = Table(
    "webhooks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("site", Boolean, nullable=False, default=False),
    Column("url", Text, nullable=False),
    Column("secret", String(128), nullable=False),
    Column("format", String(8), nullable=False),
    Column("events", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    sqlite_autoincrement=True,
)

# One event for one endpoint; `event_id` is the idempotency key, the same on every attempt.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("webhook_id", Integer, ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("event", String(64), nullable=False),
    Column("body", Text, nullable=False),
    Column("state", String(12), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Index(None, "webhook_id", "event_id"),
    Index(None, "state"),
    sqlite_autoincrement=True,
)

# The delivery log: one row per attempt, with its outcome.
webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "delivery_id",
        Integer,
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("at", UTCDateTime, nullable=False),
    Column("status", Integer),
    Column("error", Text),
    Column("ms", Float, nullable=False),
    Index(None, "delivery_id"),
    sqlite_autoincrement=True,
)

# "Tell me when N GPUs (on a host, or of a model) are free for a while before a deadline."
availability_subscriptions = Table(
    "availability_subscriptions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("gpu_count", Integer, nullable=False),
    Column("host", String(128)),
    Column("model", String(128)),
    Column("seconds", Integer, nullable=False),
    Column("deadline", UTCDateTime, nullable=False),
    Column("channels", Text, nullable=False),
    Column("email", String(255)),
    Column("repeat", Boolean, nullable=False, default=False),
    Column("active", Boolean, nullable=False, default=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("fired_at", UTCDateTime),
    Column("fired", Integer, nullable=False, default=0),
    Column("offer", Text),
    Index(None, "active"),
    sqlite_autoincrement=True,
)

# Users who asked for the daily digest e-mail, and the local day it was last sent.
digest_settings = Table(
    "digest_settings",
    metadata,
    Column("owner", String(128), primary_key=True),
    Column("enabled", Boolean, nullable=False),
    Column("email", String(255)),
    Column("last_sent", Date),
)
