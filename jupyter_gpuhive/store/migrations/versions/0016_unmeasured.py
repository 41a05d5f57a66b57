"""Not reported is not zero: memory use and utilisation time the driver did not report.

The usage tables' `mem_sum_mib` becomes nullable and `mem_samples` counts the samples that
had a memory reading, so a mean covers only those (rows written before hold every sample as
reported). The charge tables gain `unrated_seconds`: measured time whose utilisation was not
reported (a GPU in MIG mode), which efficiency leaves out (0 for rows written before).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

USAGE = ("reservation_usage", "gpu_usage_hourly")
CHARGES = ("gpu_charges_hourly", "gpu_charges_monthly", "charge_totals",
           "payer_charges_monthly", "host_charges_monthly")  # fmt: skip


def upgrade() -> None:
    for table in USAGE:
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("mem_samples", sa.Integer, nullable=False, server_default="0")
            )
            batch.alter_column("mem_sum_mib", existing_type=sa.Float, nullable=True)
        op.execute(f"UPDATE {table} SET mem_samples = samples")
    for table in CHARGES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("unrated_seconds", sa.Float, nullable=False, server_default="0")
            )


def downgrade() -> None:
    for table in CHARGES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("unrated_seconds")
    for table in USAGE:
        op.execute(f"UPDATE {table} SET mem_sum_mib = COALESCE(mem_sum_mib, 0)")
        with op.batch_alter_table(table) as batch:
            batch.alter_column("mem_sum_mib", existing_type=sa.Float, nullable=False)
            batch.drop_column("mem_samples")
