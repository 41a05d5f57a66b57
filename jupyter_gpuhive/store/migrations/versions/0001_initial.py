"""Initial schema: inventory, users, reservations (no-overlap enforced by the database), rules.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_OVERLAP_SQLITE = """
CREATE TRIGGER reservation_gpus_no_overlap_{event} BEFORE {what} ON reservation_gpus
WHEN NOT NEW.cancelled
BEGIN
  SELECT RAISE(ABORT, 'gpuhive: overlapping reservation on one GPU')
  WHERE EXISTS (
    SELECT 1 FROM reservation_gpus AS other
    WHERE other.gpu_id = NEW.gpu_id
      AND NOT other.cancelled
      AND other.reservation_id != NEW.reservation_id
      AND other.start_at < NEW.end_at
      AND other.end_at > NEW.start_at
  );
END
"""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "hosts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("username", sa.String(64)),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("declared", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("last_seen_at", UTCDateTime),
        sa.PrimaryKeyConstraint("id", name="pk_hosts"),
        sa.UniqueConstraint("name", name="uq_hosts_name"),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer),
        sa.Column("host_id", sa.Integer, nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("uuid", sa.String(96), nullable=False),
        sa.Column("model", sa.String(128)),
        sa.Column("memory_mib", sa.Integer),
        sa.PrimaryKeyConstraint("id", name="pk_gpus"),
        sa.ForeignKeyConstraint(
            ["host_id"], ["hosts.id"], name="fk_gpus_host_id_hosts", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("uuid", name="uq_gpus_uuid"),
        sa.UniqueConstraint("host_id", "idx", name="uq_gpus_host_id_idx"),
    )
    op.create_table(
        "users",
        sa.Column("name", sa.String(128)),
        sa.Column("first_seen_at", UTCDateTime, nullable=False),
        sa.Column("last_seen_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_users"),
    )
    op.create_table(
        "user_groups",
        sa.Column("user_name", sa.String(128), nullable=False),
        sa.Column("group_name", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("user_name", "group_name", name="pk_user_groups"),
        sa.ForeignKeyConstraint(
            ["user_name"], ["users.name"], name="fk_user_groups_user_name_users", ondelete="CASCADE"
        ),
    )
    op.create_table(
        "reservations",
        sa.Column("id", sa.Integer),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("start_at", UTCDateTime, nullable=False),
        sa.Column("end_at", UTCDateTime, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("cancelled_at", UTCDateTime),
        sa.Column("flagged", sa.Boolean, nullable=False),
        sa.Column("flag_reason", sa.Text),
        sa.PrimaryKeyConstraint("id", name="pk_reservations"),
    )
    op.create_index("ix_reservations_start_at", "reservations", ["start_at"])
    op.create_index("ix_reservations_owner_start_at", "reservations", ["owner", "start_at"])
    op.create_table(
        "reservation_gpus",
        sa.Column("reservation_id", sa.Integer, nullable=False),
        sa.Column("gpu_id", sa.Integer, nullable=False),
        sa.Column("start_at", UTCDateTime, nullable=False),
        sa.Column("end_at", UTCDateTime, nullable=False),
        sa.Column("cancelled", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("reservation_id", "gpu_id", name="pk_reservation_gpus"),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name="fk_reservation_gpus_reservation_id_reservations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_reservation_gpus_gpu_id_gpus"),
    )
    op.create_index(
        "ix_reservation_gpus_gpu_id_start_at", "reservation_gpus", ["gpu_id", "start_at"]
    )
    op.create_table(
        "reservation_stats",
        sa.Column("id", sa.Integer),
        sa.Column("longest_seconds", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reservation_stats"),
    )
    op.execute("INSERT INTO reservation_stats (id, longest_seconds) VALUES (1, 0)")
    op.create_table(
        "rules",
        sa.Column("id", sa.Integer),
        sa.Column("name", sa.String(120), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("valid_from", sa.Date),
        sa.Column("valid_until", sa.Date),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rules"),
    )
    if dialect == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
        op.execute(
            "ALTER TABLE reservation_gpus ADD CONSTRAINT reservation_gpus_no_overlap "
            "EXCLUDE USING gist (gpu_id WITH =, tstzrange(start_at, end_at, '[)') WITH &&) "
            "WHERE (NOT cancelled)"
        )
        op.execute(
            "ALTER TABLE reservation_gpus ADD CONSTRAINT reservation_gpus_end_after_start "
            "CHECK (end_at > start_at)"
        )
    elif dialect == "sqlite":
        op.execute(_OVERLAP_SQLITE.format(event="insert", what="INSERT"))
        op.execute(
            _OVERLAP_SQLITE.format(event="update", what="UPDATE OF start_at, end_at, cancelled")
        )


def downgrade() -> None:
    for table in (
        "rules",
        "reservation_stats",
        "reservation_gpus",
        "reservations",
        "user_groups",
        "users",
        "gpus",
        "hosts",
    ):
        op.drop_table(table)
