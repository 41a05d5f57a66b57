"""Preemptible jobs (migration 0019): loans of reserved GPUs to jobs, the jobs' preemption
history, and each reservation's lending choice (no row: it lends, reclaims on use only)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, ForeignKey, Index, Integer, String, Table, Text

from .base import UTCDateTime, metadata

# One row per (job, reservation) loan; `ended_at` NULL while the job may still run there.
job_loans = Table(
    "job_loans",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("gpus", Text, nullable=False),  # JSON list of GPU UUIDs
    Column("since", UTCDateTime, nullable=False),
    Column("reclaimed_at", UTCDateTime),  # the job was signalled
    Column("reclaim_reason", Text),
    Column("ended_at", UTCDateTime),
    Index("ix_job_loans_open", "reservation_id", "ended_at"),
    Index("ix_job_loans_job_id", "job_id"),
    sqlite_autoincrement=True,
)

# A job's history of preemptions and resumes, in order.
job_events = Table(
    "job_events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("reservation_id", Integer),
    Column("detail", Text, nullable=False),
    # A `preempted` event's GPU-seconds the run had had (migration 0021); NULL: not known.
    Column("gpu_s", Float),
    Index("ix_job_events_job_id", "job_id", "id"),
    sqlite_autoincrement=True,
)

reservation_lending = Table(
    "reservation_lending",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("lend", Boolean, nullable=False),
    Column("reclaim_before_start", Boolean, nullable=False),
)
