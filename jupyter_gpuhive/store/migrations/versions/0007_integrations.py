"""Integrations: calendar feed tokens, calendar UIDs/SEQUENCEs, webhooks and their deliveries,
availability subscriptions, daily digest settings.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jupyter_gpuhive.store.schema import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_AUTO = {"sqlite_autoincrement": True}


def upgrade() -> None:
    op.create_table(
        "feed_tokens",
        sa.Column("id", sa.Integer),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("host", sa.String(128)),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("hint", sa.String(8), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_feed_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_feed_tokens_token_hash"),
        **_AUTO,
    )
    op.create_index("ix_feed_tokens_kind_owner", "feed_tokens", ["kind", "owner"])
    op.create_table(
        "calendar_events",
        sa.Column("reservation_id", sa.Integer),
        sa.Column("uid", sa.String(64), nullable=False),
        sa.Column("sequence", sa.Integer, nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("changed_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("reservation_id", name="pk_calendar_events"),
        sa.UniqueConstraint("uid", name="uq_calendar_events_uid"),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name="fk_calendar_events_reservation_id_reservations",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("site", sa.Boolean, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("format", sa.String(8), nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhooks"),
        **_AUTO,
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer),
        sa.Column("webhook_id", sa.Integer, nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name="fk_webhook_deliveries_webhook_id_webhooks",
            ondelete="CASCADE",
        ),
        **_AUTO,
    )
    op.create_index(
        "ix_webhook_deliveries_webhook_id_event_id",
        "webhook_deliveries",
        ["webhook_id", "event_id"],
    )
    op.create_index("ix_webhook_deliveries_state", "webhook_deliveries", ["state"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.Integer),
        sa.Column("delivery_id", sa.Integer, nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("status", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("ms", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_attempts"),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name="fk_webhook_attempts_delivery_id_webhook_deliveries",
            ondelete="CASCADE",
        ),
        **_AUTO,
    )
    op.create_index("ix_webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id"])
    op.create_table(
        "availability_subscriptions",
        sa.Column("id", sa.Integer),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("host", sa.String(128)),
        sa.Column("model", sa.String(128)),
        sa.Column("seconds", sa.Integer, nullable=False),
        sa.Column("deadline", UTCDateTime, nullable=False),
        sa.Column("channels", sa.Text, nullable=False),
        sa.Column("email", sa.String(255)),
        sa.Column("repeat", sa.Boolean, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("fired_at", UTCDateTime),
        sa.Column("fired", sa.Integer, nullable=False),
        sa.Column("offer", sa.Text),
        sa.PrimaryKeyConstraint("id", name="pk_availability_subscriptions"),
        **_AUTO,
    )
    op.create_index(
        "ix_availability_subscriptions_active", "availability_subscriptions", ["active"]
    )
    op.create_table(
        "digest_settings",
        sa.Column("owner", sa.String(128)),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("email", sa.String(255)),
        sa.Column("last_sent", sa.Date),
        sa.PrimaryKeyConstraint("owner", name="pk_digest_settings"),
    )


def downgrade() -> None:
    op.drop_table("digest_settings")
    op.drop_table("availability_subscriptions")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
    op.drop_table("calendar_events")
    op.drop_table("feed_tokens")
