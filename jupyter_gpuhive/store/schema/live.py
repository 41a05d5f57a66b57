"""What the leader saw in its latest sweeps, for every replica (migration 0018).

`live_sweeps` holds one row per sweep: the sweep's samples, host states and probe latencies as
deflated JSON (`monitor.published`), written once by the leader and read by the other replicas. Only
the newest rows are kept (as many as a replica's metric series holds).
"""

from __future__ import annotations

from sqlalchemy import Column, Integer, LargeBinary, Table

from .base import UTCDateTime, metadata

live_sweeps = Table(
    "live_sweeps",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at", UTCDateTime, nullable=False),
    Column("body", LargeBinary, nullable=False),
    sqlite_autoincrement=True,  # a replica reads the rows after the last id it took
)
