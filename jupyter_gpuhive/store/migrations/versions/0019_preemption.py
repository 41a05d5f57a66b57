"""Preemptible jobs (issue #31): jobs that may run on GPUs a reservation lends.

`jobs` gains `preemptible`, `preempt_signal`, `grace_s` and `restarts`; `job_loans` records
each loan of a reservation's GPUs to a job (open while `ended_at` is NULL); `job_events` is a
job's history of preemptions and resumes; `reservation_lending` holds a booking's choice
("never lend my GPUs", reclaim before the start), a missing row meaning the defaults.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs: a batch would copy the table on SQLite and lose AUTOINCREMENT.
    op.add_column(
        "jobs", sa.Column("preemptible", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.add_column(
        "jobs",
        sa.Column("preempt_signal", sa.String(16), nullable=False, server_default="SIGTERM"),
    )
    op.add_column("jobs", sa.Column("grace_s", sa.Integer))
    op.add_column("jobs", sa.Column("restarts", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "job_loans",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "job_id", sa.Integer, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "reservation_id",
            sa.Integer,
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("gpus", sa.Text, nullable=False),
        sa.Column("since", UTCDateTime, nullable=False),
        sa.Column("reclaimed_at", UTCDateTime),
        sa.Column("reclaim_reason", sa.Text),
        sa.Column("ended_at", UTCDateTime),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_job_loans_open", "job_loans", ["reservation_id", "ended_at"])
    op.create_index("ix_job_loans_job_id", "job_loans", ["job_id"])
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "job_id", sa.Integer, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("reservation_id", sa.Integer),
        sa.Column("detail", sa.Text, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_job_events_job_id", "job_events", ["job_id", "id"])
    op.create_table(
        "reservation_lending",
        sa.Column(
            "reservation_id",
            sa.Integer,
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("lend", sa.Boolean, nullable=False),
        sa.Column("reclaim_before_start", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reservation_lending")
    op.drop_index("ix_job_events_job_id", table_name="job_events")
    op.drop_table("job_events")
    op.drop_index("ix_job_loans_job_id", table_name="job_loans")
    op.drop_index("ix_job_loans_open", table_name="job_loans")
    op.drop_table("job_loans")
    with op.batch_alter_table("jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("restarts")
        batch.drop_column("grace_s")
        batch.drop_column("preempt_signal")
        batch.drop_column("preemptible")
