"""Violation history and the actions taken on each violation.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "violations",
        sa.Column("id", sa.Integer),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("host", sa.String(128), nullable=False),
        sa.Column("gpu", sa.String(255), nullable=False),
        sa.Column("gpu_uuid", sa.String(96), nullable=False),
        sa.Column("offender", sa.String(128)),
        sa.Column("holder", sa.String(128)),
        sa.Column("reservation_id", sa.Integer),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("pids", sa.Text, nullable=False),
        sa.Column("commands", sa.Text, nullable=False),
        sa.Column("detail", sa.Text),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("last_seen_at", UTCDateTime, nullable=False),
        sa.Column("ended_at", UTCDateTime),
        sa.PrimaryKeyConstraint("id", name="pk_violations"),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name="fk_violations_reservation_id_reservations",
            ondelete="SET NULL",
        ),
    )
    op.create_index("ix_violations_started_at", "violations", ["started_at"])
    op.create_index("ix_violations_reservation_id", "violations", ["reservation_id"])
    op.create_index("ix_violations_offender_started_at", "violations", ["offender", "started_at"])
    op.create_table(
        "violation_actions",
        sa.Column("id", sa.Integer),
        sa.Column("violation_id", sa.Integer, nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("handler", sa.String(64), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_violation_actions"),
        sa.ForeignKeyConstraint(
            ["violation_id"],
            ["violations.id"],
            name="fk_violation_actions_violation_id_violations",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_violation_actions_violation_id", "violation_actions", ["violation_id"])


def downgrade() -> None:
    op.drop_table("violation_actions")
    op.drop_table("violations")
