"""The schema's metadata (naming conventions) and the UTC timestamp column type (ID_MAX: model)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    DateTime,
    MetaData,
    String,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from ...model import UTC

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC instants on every backend.

    PostgreSQL: timestamptz. SQLite: fixed-width ISO text with '+00:00', so that text order
    is time order (the overlap triggers compare it) and reading is one fromisoformat call.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(32))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime reached the store")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.isoformat(sep=" ", timespec="microseconds")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            return datetime.fromisoformat(value)
        return value if value.utcoffset() == _ZERO else value.astimezone(UTC)


_ZERO = timedelta(0)
