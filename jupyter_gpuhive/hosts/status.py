"""What the host pool reports: a command's result, a host's reachability, and failures."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model import isoformat


class HostUnavailable(Exception):
    """A host could not run a command; `reason` is a sentence for people."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"{host}: {reason}")
        self.host = host
        self.reason = reason


@dataclass(frozen=True)
class CommandResult:
    """Exit status (-1 when killed by a signal) and output of one command."""

    exit_status: int
    stdout: str
    stderr: str


@dataclass
class HostStatus:
    """Reachability of one host: 'unknown' until tried, then 'up' or 'down'."""

    name: str
    state: str = "unknown"
    error: str | None = None
    since: datetime | None = None
    last_ok: datetime | None = None
    failures: int = 0
    retry_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "error": self.error,
            "since": isoformat(self.since),
            "last_ok": isoformat(self.last_ok),
            "failures": self.failures,
        }
