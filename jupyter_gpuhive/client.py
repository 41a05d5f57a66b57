"""Published path of the notebook client; the code is in notebook/client.py."""

from .notebook.client import HiveClient, HiveClientError

__all__ = ["HiveClient", "HiveClientError"]
