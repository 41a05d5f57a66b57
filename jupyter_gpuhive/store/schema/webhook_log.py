"""The webhook delivery log in a SQLite file of its own (store/webhooks.py: `log_database`).

The same two tables as webhook_deliveries and webhook_attempts in the main schema (the store
queries both through those Table objects), created in the log file by `create_all`: without
the foreign key to `webhooks`, which lives in the main database. On PostgreSQL the log stays
in the main database.
"""

from __future__ import annotations

from sqlalchemy import MetaData

from .base import metadata
from .integrations import delivery_log_tables

log_metadata = MetaData(naming_convention=metadata.naming_convention)
log_deliveries, log_attempts = delivery_log_tables(log_metadata, with_endpoints=False)
