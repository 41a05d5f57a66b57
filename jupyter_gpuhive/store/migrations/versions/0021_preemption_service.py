"""What a preemption cost (issue #45): `job_events.gpu_s`, the GPU-seconds the job's run had
had when it was preempted (its tasks' run times up to the reclaim); NULL for other events and
for preemptions before this revision (not known).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN: a batch may copy the table on SQLite and lose its AUTOINCREMENT.
    op.add_column("job_events", sa.Column("gpu_s", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_events") as batch:
        batch.drop_column("gpu_s")
