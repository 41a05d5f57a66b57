"""A test HTTP transport (integrations/transport.py), like httpx's MockTransport: each request
is answered by a function, after the address guard's resolution, and kept with the addresses
the guard gave. For tests where a real HTTP server is not needed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from jupyter_gpuhive.integrations.addresses import host_port
from jupyter_gpuhive.integrations.transport import Address, Request, Resolve, Response


@dataclass
class Sent:
    """One request the transport carried, and the addresses it was allowed to connect to."""

    request: Request
    addresses: list[Address]


@dataclass
class MockTransports:
    """Makes transports that answer with `answer(request)`; every request sent is in `sent`."""

    answer: Callable[[Request], Response]
    sent: list[Sent] = field(default_factory=list)
    closed: int = 0

    def __call__(self, resolve: Resolve, *, connections: int) -> MockTransport:
        return MockTransport(self, resolve)


@dataclass
class MockTransport:
    """One destination's test transport."""

    transports: MockTransports
    resolve: Resolve

    async def send(self, request: Request) -> Response:
        try:
            addresses = await self.resolve(*host_port(request.url))
        except Exception as refused:  # the guard's NotSent: never answered
            return Response(None, str(refused))
        self.transports.sent.append(Sent(request, addresses))
        return self.transports.answer(request)

    def close(self) -> None:
        self.transports.closed += 1


def scripted(*statuses: int) -> MockTransports:
    """Transports answering `statuses` in turn, then 200."""
    left = list(statuses)
    return MockTransports(lambda _request: Response(left.pop(0) if left else 200))
