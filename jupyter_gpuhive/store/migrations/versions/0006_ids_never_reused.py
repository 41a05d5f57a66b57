"""Ids are never reused: SQLite tables whose ids people see get AUTOINCREMENT.

Without it SQLite hands the largest id out again after that row is deleted (job 65 deleted,
the next job is 65 again: a link or a cached id then shows someone else's job). The tables are
rebuilt with their rows, indexes and foreign keys; Database.migrate turns SQLite's foreign keys
off meanwhile, so that dropping the old table cascades nowhere, and checks them before the
commit. The overlap triggers live on reservation_gpus, which is not rebuilt.

PostgreSQL needs nothing: SERIAL ids come from sequences, which never go back.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLES = ("reservations", "rules", "jobs", "violations")


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)
