"""Reservations: an index of each owner's live (not cancelled) reservations by their end.

The fair-share check counts a user's reservations that have not ended in every booking; with
this partial index on (owner, end_at) that count reads the index alone instead of every row
of the owner's future (measured in benchmarks/fairshare.py on PostgreSQL with 100k
reservations).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

NAME = "ix_reservations_live_by_owner"


def upgrade() -> None:
    live = sa.text("cancelled_at IS NULL")
    op.create_index(
        NAME, "reservations", ["owner", "end_at"], sqlite_where=live, postgresql_where=live
    )


def downgrade() -> None:
    op.drop_index(NAME, table_name="reservations")
