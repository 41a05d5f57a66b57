"""`jupyter gpuhive migrate`: the copy itself is the store's (`store/transfer.py`)."""

from ..store.transfer import MigrationError, migrate, normalize_url

__all__ = ["MigrationError", "migrate", "normalize_url"]
