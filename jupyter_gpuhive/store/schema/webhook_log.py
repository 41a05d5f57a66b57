"""The webhook delivery log in a SQLite file of its own (store/webhooks.py: `log_database`).

The same two tables as webhook_deliveries and webhook_attempts in the main schema (the store
queries both through those Table objects), created in the log file by `create_all`: without
the foreign key to `webhooks`, which lives in the main database. On PostgreSQL the log stays
in the main database.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

from .base import UTCDateTime, metadata

log_metadata = MetaData(naming_convention=metadata.naming_convention)

log_deliveries = Table(
    "webhook_deliveries",
    log_metadata,
    Column("id", Integer, primary_key=True),
    Column("webhook_id", Integer, nullable=False),  # deleted with the endpoint, by the store
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

log_attempts = Table(
    "webhook_attempts",
    log_metadata,
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
