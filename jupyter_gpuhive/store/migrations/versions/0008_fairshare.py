"""Fair share: stored limits and tiers; GPU time and energy charged per hour, month and
reservation or job.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _charges() -> list[sa.Column[float]]:
    return [
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("used_seconds", sa.Float, nullable=False),
        sa.Column("util_seconds", sa.Float, nullable=False),
        sa.Column("energy_j", sa.Float, nullable=False),
        sa.Column("unmetered_seconds", sa.Float, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "booking_limits",
        sa.Column("scope", sa.String(8), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("updated_by", sa.String(128), nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("scope", "name", name="pk_booking_limits"),
    )
    op.create_table(
        "gpu_charges_hourly",
        sa.Column("gpu_id", sa.Integer, nullable=False),
        sa.Column("hour", UTCDateTime, nullable=False),
        sa.Column("payer", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(12), nullable=False),
        *_charges(),
        sa.PrimaryKeyConstraint("gpu_id", "hour", "payer", "kind", name="pk_gpu_charges_hourly"),
    )
    op.create_index("ix_gpu_charges_hourly_payer_hour", "gpu_charges_hourly", ["payer", "hour"])
    op.create_index("ix_gpu_charges_hourly_hour", "gpu_charges_hourly", ["hour"])
    op.create_table(
        "gpu_charges_monthly",
        sa.Column("gpu_id", sa.Integer, nullable=False),
        sa.Column("month", UTCDateTime, nullable=False),
        sa.Column("payer", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(12), nullable=False),
        *_charges(),
        sa.PrimaryKeyConstraint("gpu_id", "month", "payer", "kind", name="pk_gpu_charges_monthly"),
    )
    op.create_index("ix_gpu_charges_monthly_month", "gpu_charges_monthly", ["month"])
    op.create_table(
        "charge_totals",
        sa.Column("subject", sa.String(12), nullable=False),
        sa.Column("subject_id", sa.Integer, nullable=False),
        *_charges(),
        sa.PrimaryKeyConstraint("subject", "subject_id", name="pk_charge_totals"),
    )


def downgrade() -> None:
    op.drop_table("charge_totals")
    op.drop_index("ix_gpu_charges_monthly_month", "gpu_charges_monthly")
    op.drop_table("gpu_charges_monthly")
    op.drop_index("ix_gpu_charges_hourly_hour", "gpu_charges_hourly")
    op.drop_index("ix_gpu_charges_hourly_payer_hour", "gpu_charges_hourly")
    op.drop_table("gpu_charges_hourly")
    op.drop_table("booking_limits")
