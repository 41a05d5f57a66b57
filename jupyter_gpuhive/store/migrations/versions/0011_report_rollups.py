"""Roll-ups of the accounting report: charges per month and payer and per month and host
(filled from the charges per GPU), and GPU-hours booked per ended month, per owner and host,
with triggers that drop a month from it when a reservation within it changes.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

FIGURES = ("seconds", "used_seconds", "util_seconds", "energy_j", "unmetered_seconds")
STALE = "DELETE FROM reserved_monthly WHERE end_at > {row}.start_at AND start_at < {row}.end_at;"
# (trigger, event, table, rows whose span went stale)
SQLITE_TRIGGERS = (
    ("reserved_monthly_stale_rg_insert", "INSERT", "reservation_gpus", ("NEW",)),
    ("reserved_monthly_stale_rg_update", "UPDATE", "reservation_gpus", ("OLD", "NEW")),
    ("reserved_monthly_stale_rg_delete", "DELETE", "reservation_gpus", ("OLD",)),
    ("reserved_monthly_stale_r_update", "UPDATE OF owner, start_at, end_at, cancelled_at",
     "reservations", ("OLD", "NEW")),
    ("reserved_monthly_stale_r_delete", "DELETE", "reservations", ("OLD",)),
)  # fmt: skip
PG_FUNCTION = f"""
CREATE FUNCTION reserved_monthly_stale() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' THEN {STALE.format(row="OLD")} END IF;
  IF TG_OP <> 'DELETE' THEN {STALE.format(row="NEW")} END IF;
  RETURN NULL;
END $$
"""
PG_TRIGGERS = (
    ("reserved_monthly_stale_rg", "INSERT OR UPDATE OR DELETE", "reservation_gpus"),
    ("reserved_monthly_stale_r", "UPDATE OF owner, start_at, end_at, cancelled_at OR DELETE",
     "reservations"),
)  # fmt: skip


def _charges() -> list[sa.Column[float]]:
    return [sa.Column(name, sa.Float, nullable=False) for name in FIGURES]


def upgrade() -> None:
    op.create_table(
        "payer_charges_monthly",
        sa.Column("month", UTCDateTime, nullable=False),
        sa.Column("payer", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(12), nullable=False),
        *_charges(),
        sa.PrimaryKeyConstraint("month", "payer", "kind", name="pk_payer_charges_monthly"),
    )
    op.create_table(
        "host_charges_monthly",
        sa.Column("month", UTCDateTime, nullable=False),
        sa.Column("host_id", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(12), nullable=False),
        *_charges(),
        sa.PrimaryKeyConstraint("month", "host_id", "kind", name="pk_host_charges_monthly"),
    )
    op.create_table(
        "reserved_monthly",
        sa.Column("start_at", UTCDateTime, nullable=False),
        sa.Column("end_at", UTCDateTime, nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("host_id", sa.Integer, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint(
            "start_at", "end_at", "owner", "host_id", name="pk_reserved_monthly"
        ),
    )
    op.create_index("ix_reserved_monthly_end_at", "reserved_monthly", ["end_at"])
    sums = ", ".join(f"sum({name})" for name in FIGURES)
    columns = ", ".join(FIGURES)
    op.execute(
        f"INSERT INTO payer_charges_monthly (month, payer, kind, {columns}) "
        f"SELECT month, payer, kind, {sums} FROM gpu_charges_monthly GROUP BY month, payer, kind"
    )
    op.execute(
        f"INSERT INTO host_charges_monthly (month, host_id, kind, {columns}) "
        f"SELECT m.month, g.host_id, m.kind, {sums.replace('sum(', 'sum(m.')} "
        "FROM gpu_charges_monthly m JOIN gpus g ON g.id = m.gpu_id "
        "GROUP BY m.month, g.host_id, m.kind"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        for name, events, table in PG_TRIGGERS:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {events} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION reserved_monthly_stale()"
            )
    else:
        for name, event, table, rows in SQLITE_TRIGGERS:
            body = " ".join(STALE.format(row=row) for row in rows)
            op.execute(f"CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN {body} END")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name, _, table in PG_TRIGGERS:
            op.execute(f"DROP TRIGGER {name} ON {table}")
        op.execute("DROP FUNCTION reserved_monthly_stale()")
    else:
        for name, *_ in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_index("ix_reserved_monthly_end_at", "reserved_monthly")
    op.drop_table("reserved_monthly")
    op.drop_table("host_charges_monthly")
    op.drop_table("payer_charges_monthly")
