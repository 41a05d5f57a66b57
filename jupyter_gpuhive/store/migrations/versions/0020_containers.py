"""Containers (issue #29): placeholder, filled in by the work on that issue.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from __future__ import annotations

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
