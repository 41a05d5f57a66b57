"""GPU health as the monitor last judged it, and admins' drains (migration 0015)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, ForeignKey, Integer, String, Table, Text

from .base import UTCDateTime, metadata

# One row per GPU that was ever not ok or drained; `reasons` is a JSON list of sentences.
gpu_health = Table(
    "gpu_health",
    metadata,
    Column("gpu_id", Integer, ForeignKey("gpus.id", ondelete="CASCADE"), primary_key=True),
    Column("state", String(16), nullable=False, default="ok"),
    Column("reasons", Text, nullable=False, default="[]"),
    Column("since", UTCDateTime, nullable=False),
    Column("drained", Boolean, nullable=False, default=False),
    Column("drained_by", String(128)),
    Column("drain_reason", Text),
)
