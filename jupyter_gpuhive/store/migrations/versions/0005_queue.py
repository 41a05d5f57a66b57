"""The queue: a job the scheduler is stopping to put back in the queue says why.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("requeue_reason", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("requeue_reason")
