"""Host group settings (issue #46, item 2): what a host group's administrators set for their
group's hosts only.

host_group_settings: one row per host group that has any: `limits`, the JSON of one limits
entry (model/limits.py) that each user's bookings on the group's hosts must keep, counting
only what they hold there (NULL: none); `noshow_after_s` and `noshow_release_after_s`, the
no-show times on the group's hosts in seconds (NULL: the site's `noshow_after` and
`noshow_release_after`; `noshow_after_s` 0: no-shows are not watched there).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_group_settings",
        sa.Column("group_name", sa.String(128), primary_key=True),
        sa.Column("limits", sa.Text),
        sa.Column("noshow_after_s", sa.Float),
        sa.Column("noshow_release_after_s", sa.Float),
        sa.Column("updated_by", sa.String(128), nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    # The site's limits and no-show settings apply everywhere again.
    op.drop_table("host_group_settings")
