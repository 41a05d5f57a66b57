"""Live state for every replica, and each GPU's current and next holder from an index.

`live_sweeps`: the leader writes each sweep's samples and host states there; the other
replicas read them, so every replica serves the same live hosts and metric series (issue #33).
`ix_reservation_gpus_live`: each unit's live (not cancelled) bookings by start, so that
`GET hosts` finds the current and the next holder of a GPU with one index probe each instead
of reading every booking of the next 30 days.
`ix_violations_open`: the violations not ended, by kind: what each Prometheus scrape counts
(the same on every replica) and what a new leader continues.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

INDEX = "ix_reservation_gpus_live"
OPEN = "ix_violations_open"


def upgrade() -> None:
    op.create_table(
        "live_sweeps",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index(
        INDEX,
        "reservation_gpus",
        ["gpu_id", "start_at"],
        sqlite_where=sa.text("cancelled = 0"),  # as SQLAlchemy writes NOT cancelled there
        postgresql_where=sa.text("NOT cancelled"),
    )
    still = sa.text("ended_at IS NULL")
    op.create_index(OPEN, "violations", ["kind"], sqlite_where=still, postgresql_where=still)


def downgrade() -> None:
    op.drop_index(OPEN, table_name="violations")
    op.drop_index(INDEX, table_name="reservation_gpus")
    op.drop_table("live_sweeps")
