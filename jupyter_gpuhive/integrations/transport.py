"""The one seam HTTP leaves gpuhive through: a transport sends a request, and connects only to
the addresses the address guard gave it (like httpx's AsyncBaseTransport).

The domain builds the request, signs it and checks where it may go (delivery.py, addresses.py);
a transport only carries it. The server's (server/http_transport.py, tornado's HTTP client) is
handed to the Hive when it is wired; tests hand theirs (tests/support/http_transport.py).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Address = tuple[int, Any]  # (address family, socket address), as getaddrinfo gives


@dataclass(frozen=True)
class Request:
    """One HTTP request: never redirected, `timeout` seconds for connecting and for answering."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    timeout: float


@dataclass(frozen=True)
class Response:
    """What came back: the status, or None with why when no answer came."""

    status: int | None
    error: str | None = None


class Resolve(Protocol):
    """The address guard's resolution: the only addresses a transport may connect to for a
    host (it raises when there are none it may use)."""

    async def __call__(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[Address]: ...


class Transport(Protocol):
    """One destination's HTTP connections: sends requests, resolving hosts through `resolve`."""

    async def send(self, request: Request) -> Response:
        """Send `request` and wait for its answer (a failure to connect is a Response too)."""
        ...

    def close(self) -> None:
        """Close the connections."""
        ...


class Transports(Protocol):
    """Makes a destination's transport: its hosts resolved only by `resolve`, at most
    `connections` requests at a time."""

    def __call__(self, resolve: Resolve, *, connections: int) -> Transport: ...
