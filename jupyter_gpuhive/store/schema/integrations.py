"""Tables of the integrations (migrations 0007, 0009): feeds, webhooks, subscriptions, digests."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
)

from .base import UTCDateTime, metadata

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


def delivery_log_tables(owner: MetaData, *, with_endpoints: bool) -> tuple[Table, Table]:
    """The delivery log's two tables in `owner`: in the main schema with the foreign key to
    `webhooks`; in a log file of its own (schema/webhook_log.py) without it."""
    endpoint = (ForeignKey("webhooks.id", ondelete="CASCADE"),) if with_endpoints else ()
    # One event for one endpoint; `event_id` is the idempotency key, the same on every attempt.
    deliveries = Table(
        "webhook_deliveries",
        owner,
        Column("id", Integer, primary_key=True),
        Column("webhook_id", Integer, *endpoint, nullable=False),
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
    attempts = Table(
        "webhook_attempts",
        owner,
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
    return deliveries, attempts


webhook_deliveries, webhook_attempts = delivery_log_tables(metadata, with_endpoints=True)

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
    # no deadline was given: only a slot starting when checked counts (deadline: watch end)
    Column("starts_now", Boolean, nullable=False, default=False, server_default=false()),
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
