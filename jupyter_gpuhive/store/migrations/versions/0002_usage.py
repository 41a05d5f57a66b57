"""Usage statistics: per reservation and hourly per GPU and user.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _aggregates() -> list[sa.Column]:
    return [
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("busy_seconds", sa.Float, nullable=False),
        sa.Column("util_sum", sa.Float, nullable=False),
        sa.Column("util_max", sa.Float, nullable=False),
        sa.Column("mem_sum_mib", sa.Float, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "reservation_usage",
        sa.Column("reservation_id", sa.Integer, nullable=False),
        sa.Column("gpu_id", sa.Integer, nullable=False),
        *_aggregates(),
        sa.Column("foreign_seconds", sa.Float, nullable=False),
        sa.Column("first_at", UTCDateTime, nullable=False),
        sa.Column("last_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("reservation_id", "gpu_id", name="pk_reservation_usage"),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name="fk_reservation_usage_reservation_id_reservations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_reservation_usage_gpu_id_gpus"),
    )
    op.create_table(
        "gpu_usage_hourly",
        sa.Column("gpu_id", sa.Integer, nullable=False),
        sa.Column("hour", UTCDateTime, nullable=False),
        sa.Column("user_name", sa.String(128), nullable=False),
        *_aggregates(),
        sa.PrimaryKeyConstraint("gpu_id", "hour", "user_name", name="pk_gpu_usage_hourly"),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_gpu_usage_hourly_gpu_id_gpus"),
    )
    op.create_index("ix_gpu_usage_hourly_hour", "gpu_usage_hourly", ["hour"])


def downgrade() -> None:
    op.drop_table("gpu_usage_hourly")
    op.drop_table("reservation_usage")
