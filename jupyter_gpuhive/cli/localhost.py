"""The zero-config local host survives the first `hosts add` (or `sim up`).

With no hosts configured, a server uses this machine when its GPU tool runs here. Writing
the first host to the hosts file would end that silently, and the workstation's GPUs (and
their reservations and kernels) would vanish from gpuhive. So the command that writes the
first host writes this machine's entry first, and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class _Settings(Protocol):
    """What this needs of gpuhive's settings (the server's, or the CLI's lighter ones)."""

    hosts: Any
    auto_local_host: Any
    service_url: Any


def keep_local_host(app: _Settings, path: Path, adding: str = "") -> str | None:
    """Write this machine to the hosts file when gpuhive was using it unconfigured; the note."""
    from ..hosts.config import local_gpu_host
    from ..hosts.file import add_host, read_hosts

    if app.hosts or read_hosts(path) or not app.auto_local_host or app.service_url:
        return None
    local, _why = local_gpu_host()
    if local is None or local["name"] == adding:
        return None
    add_host(path, local)
    name = local["name"]
    return (
        f"Kept this machine ({name}) as a host: with no hosts configured gpuhive used it by "
        f"itself, and now it is in {path} with its {_gpus(len(local['gpus']))}, so "
        f"its reservations and kernels stay. To stop using it: jupyter gpuhive hosts remove {name}"
    )


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"
