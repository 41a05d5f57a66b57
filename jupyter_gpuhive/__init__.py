"""jupyter-gpuhive: exclusive GPU reservations, monitoring and jobs for shared GPU servers."""

from __future__ import annotations

from typing import Any

from ._version import __version__
from .libwarnings import quiet_third_party

quiet_third_party()

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Declare the server extension (the GpuHiveApp)."""
    from .server.app import GpuHiveApp

    return [{"module": "jupyter_gpuhive.server.app", "app": GpuHiveApp}]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext jupyter_gpuhive`: register %gpureserve, %gpustatus and %%gpujob."""
    from .notebook import load_ipython_extension as load

    load(ipython)
