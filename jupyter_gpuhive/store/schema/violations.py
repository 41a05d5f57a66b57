"""Violation history (migrations 0004, 0018): every violation and idle notice, and the actions
taken."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    text,
)

from .base import UTCDateTime, metadata

violations = Table(
    "violations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("host", String(128), nullable=False),
    Column("gpu", String(255), nullable=False),
    Column("gpu_uuid", String(96), nullable=False),
    Column("offender", String(128)),
    Column("holder", String(128)),
    Column("reservation_id", Integer, ForeignKey("reservations.id", ondelete="SET NULL")),
    Column("level", Integer, nullable=False),
    Column("pids", Text, nullable=False),
    Column("commands", Text, nullable=False),
    Column("detail", Text),
    Column("started_at", UTCDateTime, nullable=False),
    Column("last_seen_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime),
    Index(None, "started_at"),
    Index(None, "reservation_id"),
    Index(None, "offender", "started_at"),
    # the open ones (counted by each scrape, continued by a new leader; migration 0018)
    Index(
        "ix_violations_open",
        "kind",
        sqlite_where=text("ended_at IS NULL"),
        postgresql_where=text("ended_at IS NULL"),
    ),
    sqlite_autoincrement=True,  # ids are never reused (migration 0006)
)

violation_actions = Table(
    "violation_actions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "violation_id", Integer, ForeignKey("violations.id", ondelete="CASCADE"), nullable=False
    ),
    Column("at", UTCDateTime, nullable=False),
    Column("step", Integer),
    Column("handler", String(64), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("detail", Text, nullable=False),
    Index(None, "violation_id"),
)
