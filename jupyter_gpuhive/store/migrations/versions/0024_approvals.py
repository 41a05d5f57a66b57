"""Approvals (issue #46, item 4): a booking above a host's or host group's threshold is
tentative until one of the group's administrators (or a site admin) approves it.

reservations.tentative_until: set while a booking waits for its approval, the instant its
hold runs out (NULL: confirmed, as every booking before this revision). A tentative booking
holds its GPUs like any other: its reservation_gpus rows are live, so the exclusion
constraint (PostgreSQL) and the overlap triggers (SQLite) keep everyone else off its slot.
ix_reservations_tentative: the tentative bookings by the end of their hold, for the sweep
that releases those left unanswered (only the few tentative rows are in it).
reservation_approvals: one row per booking that needed approval: why (the threshold it
passed), when it was asked, and the answer (approved, declined or expired), by whom, with
the decliner's reason.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN: a batch would copy the table on SQLite and lose its AUTOINCREMENT.
    op.add_column("reservations", sa.Column("tentative_until", UTCDateTime, nullable=True))
    op.create_index(
        "ix_reservations_tentative",
        "reservations",
        ["tentative_until"],
        sqlite_where=sa.text("tentative_until IS NOT NULL"),
        postgresql_where=sa.text("tentative_until IS NOT NULL"),
    )
    op.create_table(
        "reservation_approvals",
        sa.Column(
            "reservation_id",
            sa.Integer,
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("asked_at", UTCDateTime, nullable=False),
        sa.Column("outcome", sa.String(16)),
        sa.Column("decided_by", sa.String(128)),
        sa.Column("decided_at", UTCDateTime),
        sa.Column("note", sa.Text),
        sa.CheckConstraint(
            "outcome IS NULL OR outcome IN ('approved', 'declined', 'expired')",
            name="reservation_approvals_outcome",
        ),
    )


def downgrade() -> None:
    # Without approvals every booking is confirmed: the tentative ones are released.
    op.execute(
        "UPDATE reservations SET cancelled_at = CURRENT_TIMESTAMP "
        "WHERE tentative_until IS NOT NULL AND cancelled_at IS NULL"
    )
    op.execute(
        "UPDATE reservation_gpus SET cancelled = TRUE WHERE reservation_id IN "
        "(SELECT id FROM reservations WHERE tentative_until IS NOT NULL)"
    )
    op.drop_table("reservation_approvals")
    op.drop_index("ix_reservations_tentative", "reservations")
    op.drop_column("reservations", "tentative_until")
