"""Budgets (issue #46 item 3): what a group or a user may spend per period, in GPU-hours
and/or kWh, and the warnings already sent (once per budget, period and threshold).

budgets: one row per budget; a booking's guard reads the rows of its owner and the owner's
groups (ix_budgets_scope_name) inside the booking's transaction and, on PostgreSQL, takes a
transaction-scoped advisory lock per budget first (store/budgets.py BUDGET_LOCKS), so that
bookings against one budget queue there; SQLite's writers take turns anyway.
budget_warnings: the primary key makes a warning go out once, whichever replica sends it.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("scope", sa.String(8), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("period", sa.String(8), nullable=False),
        sa.Column("starts", sa.Date),
        sa.Column("ends", sa.Date),
        sa.Column("gpu_hours", sa.Float),
        sa.Column("kwh", sa.Float),
        sa.Column("carry_over", sa.Boolean, nullable=False),
        sa.Column("overdraft_percent", sa.Float, nullable=False),
        sa.Column("warn_at", sa.Text, nullable=False),
        sa.Column("kwh_per_gpu_hour", sa.Float, nullable=False),
        sa.Column("updated_by", sa.String(128), nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_budgets"),
        sqlite_autoincrement=True,  # ids people see are never reused (0006)
    )
    op.create_index("ix_budgets_scope_name", "budgets", ["scope", "name"])
    op.create_table(
        "budget_warnings",
        sa.Column(
            "budget_id",
            sa.Integer,
            sa.ForeignKey(
                "budgets.id", ondelete="CASCADE", name="fk_budget_warnings_budget_id_budgets"
            ),
            nullable=False,
        ),
        sa.Column("period_start", UTCDateTime, nullable=False),
        sa.Column("threshold", sa.Float, nullable=False),
        sa.Column("sent_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint(
            "budget_id", "period_start", "threshold", name="pk_budget_warnings"
        ),
    )


def downgrade() -> None:
    op.drop_table("budget_warnings")
    op.drop_index("ix_budgets_scope_name", "budgets")
    op.drop_table("budgets")
