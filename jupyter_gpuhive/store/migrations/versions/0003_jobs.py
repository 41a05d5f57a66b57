"""Jobs and their tasks.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("template", sa.String(64), nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("options", sa.Text, nullable=False),
        sa.Column("variables", sa.Text, nullable=False),
        sa.Column("sweep", sa.Text, nullable=False),
        sa.Column("env", sa.Text, nullable=False),
        sa.Column("workdir", sa.Text),
        sa.Column("queued", sa.Boolean, nullable=False),
        sa.Column("walltime_s", sa.Integer),
        sa.Column("start_at", UTCDateTime),
        sa.Column("stop_at", UTCDateTime),
        sa.Column("max_retries", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("updated_by", sa.String(128)),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_owner", "jobs", ["owner"])
    op.create_table(
        "job_tasks",
        sa.Column("id", sa.Integer),
        sa.Column("job_id", sa.Integer, nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("host", sa.String(128), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("gpus", sa.Text, nullable=False),
        sa.Column("gpu_indices", sa.Text, nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("env", sa.Text, nullable=False),
        sa.Column("workdir", sa.Text),
        sa.Column("variables", sa.Text, nullable=False),
        sa.Column("session", sa.String(128), nullable=False),
        sa.Column("log_path", sa.Text, nullable=False),
        sa.Column("exit_path", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("exit_status", sa.Integer),
        sa.Column("screen_pid", sa.Integer),
        sa.Column("pgid", sa.Integer),
        sa.Column("started_at", UTCDateTime),
        sa.Column("ended_at", UTCDateTime),
        sa.Column("last_error", sa.Text),
        sa.PrimaryKeyConstraint("id", name="pk_job_tasks"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_tasks_job_id_jobs", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("job_id", "idx", name="uq_job_tasks_job_id_idx"),
    )
    op.create_index("ix_job_tasks_state", "job_tasks", ["state"])


def downgrade() -> None:
    op.drop_table("job_tasks")
    op.drop_table("jobs")
