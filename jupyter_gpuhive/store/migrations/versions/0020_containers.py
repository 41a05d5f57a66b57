"""Containers (issue #29): a job may run in an image.

`jobs.container`: the image, the allowed mounts the job picked and the reservation it was
created from, as JSON; NULL for a bare job (every job before this revision).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN: a batch may copy the table on SQLite and lose its AUTOINCREMENT.
    op.add_column("jobs", sa.Column("container", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("container")
