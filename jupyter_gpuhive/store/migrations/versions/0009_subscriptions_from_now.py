"""Availability subscriptions made without a deadline look for GPUs free from now on.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("availability_subscriptions") as batch:
        batch.add_column(
            sa.Column("starts_now", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("availability_subscriptions") as batch:
        batch.drop_column("starts_now")
