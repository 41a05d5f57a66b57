"""The GPU topology of each host (the vendor's topology command): links, CPU and NUMA
affinity; and a covering index on reservation_gpus for the earliest-slot search's window read.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_topology",
        sa.Column(
            "host_id",
            sa.Integer,
            sa.ForeignKey("hosts.id", ondelete="CASCADE", name="fk_host_topology_host_id_hosts"),
            nullable=False,
        ),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("raw", sa.Text, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("host_id", name="pk_host_topology"),
    )
    op.create_index(
        "ix_reservation_gpus_span",
        "reservation_gpus",
        ["start_at", "end_at", "gpu_id", "device_id", "cancelled"],
    )


def downgrade() -> None:
    op.drop_index("ix_reservation_gpus_span", "reservation_gpus")
    op.drop_table("host_topology")
