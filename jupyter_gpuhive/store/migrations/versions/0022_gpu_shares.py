"""Shares of a GPU (issue #44): a booking may hold a part of one shareable GPU, and the shares
live on a GPU add up to at most one whole GPU at every instant.

gpus.shareable: the site lets bookings share it (hosts config, written by the inventory).
reservation_gpus.share_ppm: the share of the unit a row holds, in millionths (1000000: all).
reservation_gpus ix_reservation_gpus_device_end: each device's live rows by end, so that the
checks read only the rows that end after a booking starts.

The rule, the same on both databases (docs/explanation/double-booking.md says why it is
race-free):
- two whole rows (whole GPUs or slices, share 1000000) conflict as before 0022: the exclusion
  constraint on PostgreSQL (now limited to whole rows), the triggers' first check on SQLite;
- a partial row is of a whole shareable GPU (never of a slice);
- wherever a partial row is involved, the row being written plus the largest sum of the
  other live rows of its GPU at any instant of its span must not exceed 1000000 (a slice's
  row counts whole there: a GPU split into slices holds no shares).
PostgreSQL checks the last two in the BEFORE trigger reservation_gpus_shares, which first
takes the device's transaction-scoped advisory lock (the lock space Reservations takes in
order, store/reservations.py DEVICE_LOCKS) and then reads, under READ COMMITTED, every row
committed before it: writers of one GPU's rows queue there. SQLite checks them in the two
overlap triggers; its writers are serialized.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

WHOLE = 1000000  # model/shares.py WHOLE
DEVICE_LOCKS = 0x67707568  # store/reservations.py DEVICE_LOCKS

_UNIT = "int4range(NULLIF(gpu_id, device_id), NULLIF(gpu_id, device_id) + 1)"
_EXCLUDE = (
    "ALTER TABLE reservation_gpus ADD CONSTRAINT reservation_gpus_no_overlap "
    f"EXCLUDE USING gist (device_id WITH =, {_UNIT} WITH &&, "
    "tstzrange(start_at, end_at, '[)') WITH &&) WHERE (NOT cancelled{whole})"
)

# The largest sum of the other live rows' shares of NEW's device at an instant of NEW's span
# (where a partial row is involved): a sum only grows where a row starts, so the instants to
# try are NEW's start and the other rows' starts inside its span. {live} is how a dialect says
# "not cancelled" so that its planner reads the rows by the partial index of each device's
# live rows by end (SQLite matches `cancelled = 0` to it, not `NOT cancelled`): only the rows
# that end after the instant, never the device's history.
_PEAK_TEMPLATE = f"""
  SELECT coalesce(max(load), 0) FROM (
    SELECT (
      SELECT coalesce(sum(o.share_ppm), 0) FROM reservation_gpus AS o
      WHERE o.device_id = NEW.device_id AND {{live}}
        AND o.reservation_id != NEW.reservation_id
        AND (o.share_ppm < {WHOLE} OR NEW.share_ppm < {WHOLE})
        AND o.end_at > t.at AND o.start_at <= t.at
    ) AS load
    FROM (
      SELECT NEW.start_at AS at
      UNION
      SELECT s.start_at FROM reservation_gpus AS s
      WHERE s.device_id = NEW.device_id AND {{live_s}}
        AND s.reservation_id != NEW.reservation_id
        AND s.end_at > NEW.start_at AND s.start_at > NEW.start_at AND s.start_at < NEW.end_at
    ) AS t
  ) AS loads"""

_PEAK_SQLITE = _PEAK_TEMPLATE.format(live="o.cancelled = 0", live_s="s.cancelled = 0")
_PEAK_PG = _PEAK_TEMPLATE.format(live="NOT o.cancelled", live_s="NOT s.cancelled")

_SHARE_WHERE = f"""NEW.share_ppm < {WHOLE} AND (
    NEW.gpu_id != NEW.device_id
    OR NOT (SELECT shareable FROM gpus WHERE id = NEW.device_id))"""

# 0010's triggers with the share checks in {shares} (the downgrade writes them without)
_TRIGGER_SQLITE = """
CREATE TRIGGER reservation_gpus_no_overlap_{event} BEFORE {what} ON reservation_gpus
WHEN NOT NEW.cancelled
BEGIN
  SELECT RAISE(ABORT, 'gpuhive: device_id must be the physical GPU of gpu_id')
  WHERE NEW.device_id IS NOT (SELECT coalesce(parent_id, id) FROM gpus WHERE id = NEW.gpu_id);
  SELECT RAISE(ABORT, 'gpuhive: overlapping reservation on one GPU')
  WHERE {whole_new}EXISTS (
    SELECT 1 FROM reservation_gpus AS other
    WHERE other.device_id = NEW.device_id{whole_other}
      AND (other.gpu_id = NEW.gpu_id OR other.gpu_id = other.device_id
           OR NEW.gpu_id = NEW.device_id)
      AND other.cancelled = 0
      AND other.reservation_id != NEW.reservation_id
      AND other.start_at < NEW.end_at
      AND other.end_at > NEW.start_at
  );{shares}
END
"""
_SHARES_SQLITE = f"""
  SELECT RAISE(ABORT, 'gpuhive: a share must be of a whole GPU that is shareable')
  WHERE {_SHARE_WHERE};
  SELECT RAISE(ABORT, 'gpuhive: overlapping reservation on one GPU: its shares exceed it')
  WHERE NEW.share_ppm + ({_PEAK_SQLITE}) > {WHOLE};"""


def _sqlite_trigger(event: str, what: str, shares: bool) -> str:
    if not shares:
        return _TRIGGER_SQLITE.format(
            event=event, what=what, whole_new="", whole_other="", shares=""
        )
    return _TRIGGER_SQLITE.format(
        event=event,
        what=what,
        whole_new=f"NEW.share_ppm = {WHOLE} AND ",
        whole_other=f"\n      AND other.share_ppm = {WHOLE}",
        shares=_SHARES_SQLITE,
    )


_SHARES_PG = f"""
CREATE FUNCTION gpuhive_shares() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  peak bigint;
BEGIN
  IF NEW.cancelled THEN
    RETURN NEW;
  END IF;
  IF {_SHARE_WHERE} THEN
    RAISE EXCEPTION 'gpuhive: a share must be of a whole GPU that is shareable'
      USING ERRCODE = '23514';
  END IF;
  -- Writers of one GPU's rows take turns: each reads below what the previous committed.
  PERFORM pg_advisory_xact_lock({DEVICE_LOCKS}, NEW.device_id);
  IF current_setting('transaction_isolation') = 'repeatable read' THEN
    -- its snapshot is older than the lock: it could miss a share committed meanwhile
    RAISE EXCEPTION 'gpuhive: bookings are written under READ COMMITTED or SERIALIZABLE'
      USING ERRCODE = '0A000';
  END IF;
  {_PEAK_PG.strip()} INTO peak;
  IF NEW.share_ppm + peak > {WHOLE} THEN
    RAISE EXCEPTION 'gpuhive: overlapping reservation on one GPU: its shares exceed it'
      USING ERRCODE = '23P01';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER reservation_gpus_shares
  BEFORE INSERT OR UPDATE OF gpu_id, device_id, start_at, end_at, cancelled, share_ppm
  ON reservation_gpus FOR EACH ROW EXECUTE FUNCTION gpuhive_shares();
"""
_TRIGGER_EVENTS = (
    ("insert", "INSERT"),
    ("update", "UPDATE OF gpu_id, device_id, start_at, end_at, cancelled, share_ppm"),
)
_OLD_TRIGGER_EVENTS = (
    ("insert", "INSERT"),
    ("update", "UPDATE OF gpu_id, device_id, start_at, end_at, cancelled"),
)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    # Plain ADD COLUMNs: a batch would copy the tables on SQLite and drop their triggers.
    op.add_column(
        "gpus", sa.Column("shareable", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.execute(
        f"ALTER TABLE reservation_gpus ADD COLUMN share_ppm INTEGER NOT NULL DEFAULT {WHOLE} "
        f"CONSTRAINT reservation_gpus_share_range CHECK (share_ppm > 0 AND share_ppm <= {WHOLE})"
    )
    op.create_index(
        "ix_reservation_gpus_device_end",
        "reservation_gpus",
        ["device_id", "end_at"],
        sqlite_where=sa.text("cancelled = 0"),
        postgresql_where=sa.text("NOT cancelled"),
    )
    if dialect == "postgresql":
        op.execute("ALTER TABLE reservation_gpus DROP CONSTRAINT reservation_gpus_no_overlap")
        op.execute(_EXCLUDE.format(whole=f" AND share_ppm = {WHOLE}"))
        op.execute(_SHARES_PG)
    elif dialect == "sqlite":
        for event, what in _TRIGGER_EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS reservation_gpus_no_overlap_{event}")
            op.execute(_sqlite_trigger(event, what, shares=True))


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    # Shares cannot be expressed before 0022: their bookings are cancelled, their rows go.
    op.execute(
        "UPDATE reservations SET cancelled_at = CURRENT_TIMESTAMP WHERE cancelled_at IS NULL "
        f"AND id IN (SELECT reservation_id FROM reservation_gpus WHERE share_ppm < {WHOLE})"
    )
    op.execute(f"DELETE FROM reservation_gpus WHERE share_ppm < {WHOLE}")
    if dialect == "postgresql":
        op.execute("DROP TRIGGER reservation_gpus_shares ON reservation_gpus")
        op.execute("DROP FUNCTION gpuhive_shares()")
        op.execute("ALTER TABLE reservation_gpus DROP CONSTRAINT reservation_gpus_no_overlap")
        op.execute(_EXCLUDE.format(whole=""))
    elif dialect == "sqlite":
        for event, _ in _TRIGGER_EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS reservation_gpus_no_overlap_{event}")
    op.drop_index("ix_reservation_gpus_device_end", "reservation_gpus")
    if dialect == "postgresql":
        op.execute("ALTER TABLE reservation_gpus DROP CONSTRAINT reservation_gpus_share_range")
    op.drop_column("reservation_gpus", "share_ppm")
    op.drop_column("gpus", "shareable")
    if dialect == "sqlite":
        for event, what in _OLD_TRIGGER_EVENTS:
            op.execute(_sqlite_trigger(event, what, shares=False))
