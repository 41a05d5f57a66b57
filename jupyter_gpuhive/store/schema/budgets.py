"""Budgets of groups and users per period, and the warnings sent (migration 0023)."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
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
)

from .base import UTCDateTime, metadata

budgets = Table(
    "budgets",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("scope", String(8), nullable=False),  # 'group' | 'user'
    Column("name", String(128), nullable=False),
    Column("period", String(8), nullable=False),  # 'month' | 'quarter' | 'dates'
    Column("starts", Date),
    Column("ends", Date),
    Column("gpu_hours", Float),
    Column("kwh", Float),
    Column("carry_over", Boolean, nullable=False),
    Column("overdraft_percent", Float, nullable=False),
    Column("warn_at", Text, nullable=False),  # JSON list of percentages
    Column("kwh_per_gpu_hour", Float, nullable=False),
    Column("updated_by", String(128), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index(None, "scope", "name"),
    sqlite_autoincrement=True,
)

# One row per budget, period and threshold warned about: a warning goes out once.
budget_warnings = Table(
    "budget_warnings",
    metadata,
    Column("budget_id", Integer, ForeignKey("budgets.id", ondelete="CASCADE"), nullable=False),
    Column("period_start", UTCDateTime, nullable=False),
    Column("threshold", Float, nullable=False),
    Column("sent_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("budget_id", "period_start", "threshold"),
)
