"""Client mode: a user's server forwards gpuhive API calls to the team's gpuhive service.

The call carries the user's own Hub token (the server's JUPYTERHUB_API_TOKEN), so the
service sees that user and nobody else, whatever this server's configuration says. Before
it goes, this server's own Authorizer is asked about the route's resource and action (as
the service's routes declare them): a site may refuse gpuhive on its users' servers too.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..public_url import FORWARDED
from . import declared

# What passes through besides the body: a retry's key one way, how to retry the other.
REQUEST_HEADERS = ("Idempotency-Key",)
ANSWER_HEADERS = ("Retry-After", "Idempotent-Replayed", "Location")


class ProxyHandler(APIHandler):
    """Forwards `gpuhive/api/<path>` to `<service_url>api/<path>`."""

    def _target(self, path: str) -> str:
        base = self.settings["gpuhive_service_url"].rstrip("/") + "/api/" + path
        query = self.request.query
        return f"{base}?{query}" if query else base

    async def _forward(self, path: str) -> None:
        await self._authorize(path)
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        body = self.request.body if self.request.method in ("POST", "PUT", "PATCH") else None
        headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
        for name in (*FORWARDED, *REQUEST_HEADERS):  # FORWARDED: where the Hub's proxy was
            if self.request.headers.get(name):  # reached (the service's public URL)
                headers[name] = self.request.headers[name]
        request = HTTPRequest(
            self._target(path),
            method=self.request.method or "GET",
            headers=headers,
            body=body if body is not None or self.request.method == "GET" else b"",
            allow_nonstandard_methods=True,
            request_timeout=60,
        )
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (HTTPClientError, OSError) as error:
            self.set_status(503)
            self.finish({"message": f"The gpuhive service cannot be reached: {error}"})
            return
        if response.code == 599:
            self.set_status(503)
            self.finish({"message": f"The gpuhive service cannot be reached: {response.error}"})
            return
        self.set_status(response.code)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        for name in ANSWER_HEADERS:
            if response.headers.get(name):
                self.set_header(name, response.headers[name])
        self.finish(response.body or b"")

    async def _authorize(self, path: str) -> None:
        """This server's Authorizer on the route's resource and action (the service then
        decides by gpuhive's policy and the Hub's scopes); a refusal is a 403 with a message."""
        method = (self.request.method or "GET").lower()
        resource, action = declared(path, method)
        user = self.current_user
        if not await ensure_async(self.authorizer.is_authorized(self, user, action, resource)):
            raise web.HTTPError(
                403, f"This server's authorizer does not allow {user.username} to {action} "
                f"{resource}; ask the site's administrators.",
            )  # fmt: skip

    @web.authenticated
    async def get(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    async def post(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    async def patch(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    async def put(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    async def delete(self, path: str) -> None:
        await self._forward(path)


def proxy_routes(prefix: str) -> list[tuple[str, Any]]:
    return [(prefix + "/(.*)", ProxyHandler)]
