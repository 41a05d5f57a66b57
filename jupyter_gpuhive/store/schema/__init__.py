"""The relational schema (SQLAlchemy Core), every table in this package; Alembic migrations
create it and a test compares. Repositories (the other `store` modules) only use it."""

from ...model import ID_MAX
from .base import UTCDateTime, metadata
from .bookings import (
    gpu_usage_hourly,
    gpus,
    hosts,
    reservation_approvals,
    reservation_gpus,
    reservation_stats,
    reservation_usage,
    reservations,
    rules,
    user_groups,
    users,
)
from .budgets import budget_warnings, budgets
from .fairshare import (
    booking_limits,
    charge_totals,
    gpu_charges_hourly,
    gpu_charges_monthly,
    host_group_settings,
)
from .health import gpu_health
from .idempotency import idempotency_keys
from .integrations import (
    availability_subscriptions,
    calendar_events,
    digest_settings,
    feed_tokens,
    webhook_attempts,
    webhook_deliveries,
    webhooks,
)
from .jobs import job_tasks, jobs
from .live import live_sweeps
from .preemption import job_events, job_loans, reservation_lending
from .rollups import host_charges_monthly, payer_charges_monthly, reserved_monthly
from .topology import host_topology
from .violations import violation_actions, violations
from .webhook_log import log_attempts, log_deliveries, log_metadata

__all__ = [
    "ID_MAX",
    "UTCDateTime",
    "availability_subscriptions",
    "booking_limits",
    "budget_warnings",
    "budgets",
    "calendar_events",
    "charge_totals",
    "digest_settings",
    "feed_tokens",
    "gpu_charges_hourly",
    "gpu_charges_monthly",
    "gpu_health",
    "gpu_usage_hourly",
    "gpus",
    "host_charges_monthly",
    "host_group_settings",
    "host_topology",
    "hosts",
    "idempotency_keys",
    "job_events",
    "job_loans",
    "job_tasks",
    "jobs",
    "live_sweeps",
    "log_attempts",
    "log_deliveries",
    "log_metadata",
    "metadata",
    "payer_charges_monthly",
    "reservation_approvals",
    "reservation_gpus",
    "reservation_lending",
    "reservation_stats",
    "reservation_usage",
    "reservations",
    "reserved_monthly",
    "rules",
    "user_groups",
    "users",
    "violation_actions",
    "violations",
    "webhook_attempts",
    "webhook_deliveries",
    "webhooks",
]
