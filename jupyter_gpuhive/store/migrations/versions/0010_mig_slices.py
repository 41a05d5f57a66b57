"""MIG slices are bookable: slices are rows of gpus under their parent; the overlap rule covers
a whole GPU against each of its slices, both ways.

gpus: parent_id, gpu_instance_id, compute_instance_id, profile, removed_at; (host_id, idx) is
unique among physical GPUs only (a slice shares its parent's index).
reservation_gpus.device_id: the physical GPU of the booked unit (gpu_id for a whole GPU).
Two live rows conflict when they overlap in time on one device and either is the whole GPU or
both are the same slice:
- PostgreSQL: the exclusion constraint adds a unit range: (-inf, inf) for a whole GPU,
  [gpu_id, gpu_id + 1) for a slice, compared with && like the time range.
- SQLite: the same condition in the two overlap triggers (writes are serialized).
Both refuse a row whose device_id is not its unit's physical GPU (SQLite: in the same triggers;
PostgreSQL: the trigger reservation_gpus_device).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_NOT_NULL_PARENT = sa.text("parent_id IS NULL")

_OVERLAP_SQLITE = """
CREATE TRIGGER reservation_gpus_no_overlap_{event} BEFORE {what} ON reservation_gpus
WHEN NOT NEW.cancelled
BEGIN
  SELECT RAISE(ABORT, 'gpuhive: device_id must be the physical GPU of gpu_id')
  WHERE NEW.device_id IS NOT (SELECT coalesce(parent_id, id) FROM gpus WHERE id = NEW.gpu_id);
  SELECT RAISE(ABORT, 'gpuhive: overlapping reservation on one GPU')
  WHERE EXISTS (
    SELECT 1 FROM reservation_gpus AS other
    WHERE other.device_id = NEW.device_id
      AND (other.gpu_id = NEW.gpu_id OR other.gpu_id = other.device_id
           OR NEW.gpu_id = NEW.device_id)
      AND NOT other.cancelled
      AND other.reservation_id != NEW.reservation_id
      AND other.start_at < NEW.end_at
      AND other.end_at > NEW.start_at
  );
END
"""
_OLD_OVERLAP_SQLITE = """
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
# PostgreSQL: a row's device_id must be its unit's physical GPU (a slice never changes parent).
_DEVICE_CHECK_PG = """
CREATE FUNCTION gpuhive_unit_device() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.device_id IS DISTINCT FROM
     (SELECT coalesce(parent_id, id) FROM gpus WHERE id = NEW.gpu_id) THEN
    RAISE EXCEPTION 'gpuhive: device_id must be the physical GPU of gpu_id'
      USING ERRCODE = '23514';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER reservation_gpus_device BEFORE INSERT OR UPDATE OF gpu_id, device_id
  ON reservation_gpus FOR EACH ROW EXECUTE FUNCTION gpuhive_unit_device();
"""
_UNIT = "int4range(NULLIF(gpu_id, device_id), NULLIF(gpu_id, device_id) + 1)"
_TRIGGER_EVENTS = (
    ("insert", "INSERT"),
    ("update", "UPDATE OF gpu_id, device_id, start_at, end_at, cancelled"),
)
_OLD_TRIGGER_EVENTS = (("insert", "INSERT"), ("update", "UPDATE OF start_at, end_at, cancelled"))


def _drop_overlap_rule(dialect: str) -> None:
    if dialect == "postgresql":
        op.execute("ALTER TABLE reservation_gpus DROP CONSTRAINT reservation_gpus_no_overlap")
    elif dialect == "sqlite":
        for event, _ in _TRIGGER_EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS reservation_gpus_no_overlap_{event}")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_overlap_rule(dialect)
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer))
        batch.add_column(sa.Column("gpu_instance_id", sa.Integer))
        batch.add_column(sa.Column("compute_instance_id", sa.Integer))
        batch.add_column(sa.Column("profile", sa.String(32)))
        batch.add_column(sa.Column("removed_at", UTCDateTime))
        batch.drop_constraint("uq_gpus_host_id_idx", type_="unique")
        batch.create_foreign_key("fk_gpus_parent_id_gpus", "gpus", ["parent_id"], ["id"])
        batch.create_index("ix_gpus_parent_id", ["parent_id"])
    op.create_index(
        "uq_gpus_host_id_idx",
        "gpus",
        ["host_id", "idx"],
        unique=True,
        sqlite_where=_NOT_NULL_PARENT,
        postgresql_where=_NOT_NULL_PARENT,
    )
    with op.batch_alter_table("reservation_gpus") as batch:
        batch.add_column(sa.Column("device_id", sa.Integer))
    op.execute("UPDATE reservation_gpus SET device_id = gpu_id")
    with op.batch_alter_table("reservation_gpus") as batch:
        batch.alter_column("device_id", existing_type=sa.Integer, nullable=False)
        batch.create_foreign_key(
            "fk_reservation_gpus_device_id_gpus", "gpus", ["device_id"], ["id"]
        )
        batch.create_index("ix_reservation_gpus_device_id_start_at", ["device_id", "start_at"])
    if dialect == "postgresql":
        op.execute(
            "ALTER TABLE reservation_gpus ADD CONSTRAINT reservation_gpus_no_overlap "
            f"EXCLUDE USING gist (device_id WITH =, {_UNIT} WITH &&, "
            "tstzrange(start_at, end_at, '[)') WITH &&) WHERE (NOT cancelled)"
        )
        op.execute(_DEVICE_CHECK_PG)
    elif dialect == "sqlite":
        for event, what in _TRIGGER_EVENTS:
            op.execute(_OVERLAP_SQLITE.format(event=event, what=what))


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_overlap_rule(dialect)
    if dialect == "postgresql":
        op.execute("DROP TRIGGER reservation_gpus_device ON reservation_gpus")
        op.execute("DROP FUNCTION gpuhive_unit_device()")
    # Bookings of slices cannot be expressed before 0010: they go with their slices.
    op.execute("DELETE FROM reservation_gpus WHERE gpu_id != device_id")
    with op.batch_alter_table("reservation_gpus") as batch:
        batch.drop_index("ix_reservation_gpus_device_id_start_at")
        batch.drop_constraint("fk_reservation_gpus_device_id_gpus", type_="foreignkey")
        batch.drop_column("device_id")
    op.execute("DELETE FROM gpus WHERE parent_id IS NOT NULL")
    op.drop_index("uq_gpus_host_id_idx", "gpus")
    with op.batch_alter_table("gpus") as batch:
        batch.drop_index("ix_gpus_parent_id")
        batch.drop_constraint("fk_gpus_parent_id_gpus", type_="foreignkey")
        for column in ("removed_at", "profile", "compute_instance_id", "gpu_instance_id"):
            batch.drop_column(column)
        batch.drop_column("parent_id")
        batch.create_unique_constraint("uq_gpus_host_id_idx", ["host_id", "idx"])
    if dialect == "postgresql":
        op.execute(
            "ALTER TABLE reservation_gpus ADD CONSTRAINT reservation_gpus_no_overlap "
            "EXCLUDE USING gist (gpu_id WITH =, tstzrange(start_at, end_at, '[)') WITH &&) "
            "WHERE (NOT cancelled)"
        )
    elif dialect == "sqlite":
        for event, what in _OLD_TRIGGER_EVENTS:
            op.execute(_OLD_OVERLAP_SQLITE.format(event=event, what=what))
