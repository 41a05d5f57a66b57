"""GPU health (ok / degraded / failed with reasons) and admins' drains.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_health",
        sa.Column(
            "gpu_id",
            sa.Integer,
            sa.ForeignKey("gpus.id", ondelete="CASCADE", name="fk_gpu_health_gpu_id_gpus"),
            nullable=False,
        ),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reasons", sa.Text, nullable=False),
        sa.Column("since", UTCDateTime, nullable=False),
        sa.Column("drained", sa.Boolean, nullable=False),
        sa.Column("drained_by", sa.String(128)),
        sa.Column("drain_reason", sa.Text),
        sa.PrimaryKeyConstraint("gpu_id", name="pk_gpu_health"),
    )


def downgrade() -> None:
    op.drop_table("gpu_health")
