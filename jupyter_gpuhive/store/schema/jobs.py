"""Jobs and their tasks (migrations 0003, 0005, 0019): one row per job, one per task."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from .base import UTCDateTime, metadata

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("owner", String(128), nullable=False),
    Column("description", Text, nullable=False),
    Column("template", String(64), nullable=False),
    Column("command", Text, nullable=False),
    Column("options", Text, nullable=False),
    Column("variables", Text, nullable=False),
    Column("sweep", Text, nullable=False),
    Column("env", Text, nullable=False),
    Column("workdir", Text),
    Column("queued", Boolean, nullable=False),
    Column("walltime_s", Integer),
    Column("start_at", UTCDateTime),
    Column("stop_at", UTCDateTime),
    Column("max_retries", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("updated_by", String(128)),
    # Set while the scheduler stops a queued job to put it back in the queue (crash-safe).
    Column("requeue_reason", Text),
    # A container job's image, mounts and reservation as JSON (migration 0020); NULL: bare.
    Column("container", Text),
    # Preemptible jobs (migration 0019): may run on lent GPUs; restarts counts preemptions.
    Column("preemptible", Boolean, nullable=False, default=False),
    Column("preempt_signal", String(16), nullable=False, default="SIGTERM"),
    Column("grace_s", Integer),
    Column("restarts", Integer, nullable=False, default=0),
    Index(None, "owner"),
    sqlite_autoincrement=True,  # ids are never reused (migration 0006)
)

job_tasks = Table(
    "job_tasks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("host", String(128), nullable=False),
    Column("address", String(255), nullable=False),
    Column("role", String(32), nullable=False),
    Column("gpus", Text, nullable=False),
    Column("gpu_indices", Text, nullable=False),
    Column("command", Text, nullable=False),
    Column("env", Text, nullable=False),
    Column("workdir", Text),
    Column("variables", Text, nullable=False),
    Column("session", String(128), nullable=False),
    Column("log_path", Text, nullable=False),
    Column("exit_path", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("exit_status", Integer),
    Column("screen_pid", Integer),  # Task.handle, the runner's (store/jobrows.HANDLE_COLUMN)
    Column("pgid", Integer),
    Column("started_at", UTCDateTime),
    Column("ended_at", UTCDateTime),
    Column("last_error", Text),
    UniqueConstraint("job_id", "idx"),
    Index(None, "state"),
)
