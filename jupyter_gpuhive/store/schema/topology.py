"""The GPU topology each host reported (the vendor's topology command), as JSON (migration 0012)."""

from __future__ import annotations

from sqlalchemy import Column, ForeignKey, Integer, Table, Text

from .base import UTCDateTime, metadata

# One row per host: `spec` is `model.topology.Topology.to_json()`; `raw` the text it was read from.
host_topology = Table(
    "host_topology",
    metadata,
    Column("host_id", Integer, ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True),
    Column("spec", Text, nullable=False),
    Column("raw", Text, nullable=False, default=""),
    Column("updated_at", UTCDateTime, nullable=False),
)
