"""The server's HTTP transport (integrations/transport.py): tornado's HTTP client, resolving
hosts only through the address guard it is given. The Hive is wired with it (settings.py)."""

from __future__ import annotations

import socket

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.netutil import Resolver

from ..integrations.transport import Address, Request, Resolve, Response


class GuardedResolver(Resolver):
    """A tornado resolver that answers with the address guard's resolution only."""

    def initialize(self, resolve: Resolve) -> None:
        self._resolve = resolve

    async def resolve(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[Address]:
        return await self._resolve(host, port, family)


class TornadoTransport:
    """One destination's tornado HTTP client: never redirected, bounded by the request's timeout."""

    def __init__(self, resolve: Resolve, *, connections: int) -> None:
        self.client = AsyncHTTPClient(
            force_instance=True, max_clients=connections, resolver=GuardedResolver(resolve=resolve)
        )

    async def send(self, request: Request) -> Response:
        """Send `request`; no connection or no answer in time is a Response without status."""
        fetched = HTTPRequest(
            request.url,
            method=request.method,
            body=request.body,
            headers=dict(request.headers),
            connect_timeout=request.timeout,
            request_timeout=request.timeout,
            follow_redirects=False,
        )
        try:
            reply = await self.client.fetch(fetched, raise_error=False)
        except Exception as failure:  # refused, TLS, the guard's NotSent: no answer
            return Response(None, str(failure) or type(failure).__name__)
        if reply.code == 599:
            return Response(None, str(reply.error or "no answer"))
        return Response(reply.code)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
