"""Availability subscriptions made without a deadline look for GPUs free from now on.

SQLite rebuilds the table for this: it keeps AUTOINCREMENT (0006: ids are never reused).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# without it, SQLite's rebuilt table would hand a deleted subscription's id out again
KEEP_IDS = {"sqlite_autoincrement": True}
revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("availability_subscriptions", table_kwargs=KEEP_IDS) as batch:
        batch.add_column(
            sa.Column("starts_now", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("availability_subscriptions", table_kwargs=KEEP_IDS) as batch:
        batch.drop_column("starts_now")
