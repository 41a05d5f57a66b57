"""Idempotency keys of creating POSTs (migration 0017): a retried request gets the first answer.

One row per (user, key). `fingerprint` is a digest of the method, path and body the key was
first used with (the same key with another request is refused); `status`, `body` and
`location` are the first request's answer; `status` is NULL while that request has changed
nothing yet and 0 once a write of it committed but its answer is not stored yet.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, String, Table, Text

from .base import UTCDateTime, metadata

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("owner", String(128), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("status", Integer),
    Column("body", Text),
    Column("location", Text),  # the answer's Location header (a 201's new resource)
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_idempotency_keys_created_at", "created_at"),
)
