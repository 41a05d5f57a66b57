"""Usage: utilisation the driver does not report (MIG slices, GPUs in MIG mode) is NULL, not 0.

`util_sum`/`util_max` become nullable and `util_samples` counts the samples that had a
utilisation, so a mean covers only those (rows written before hold every sample as reported).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

TABLES = ("reservation_usage", "gpu_usage_hourly")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("util_samples", sa.Integer, nullable=False, server_default="0")
            )
            batch.alter_column("util_sum", existing_type=sa.Float, nullable=True)
            batch.alter_column("util_max", existing_type=sa.Float, nullable=True)
        op.execute(f"UPDATE {table} SET util_samples = samples")


def downgrade() -> None:
    for table in TABLES:
        op.execute(
            f"UPDATE {table} SET util_sum = COALESCE(util_sum, 0), util_max = COALESCE(util_max, 0)"
        )
        with op.batch_alter_table(table) as batch:
            batch.alter_column("util_max", existing_type=sa.Float, nullable=False)
            batch.alter_column("util_sum", existing_type=sa.Float, nullable=False)
            batch.drop_column("util_samples")
