"""Client mode: this server's own calls to the team's gpuhive service, as its user.

The provisioner of reservation kernels (`kernels/team.py`) uses it: each call carries the
server's Hub token (JUPYTERHUB_API_TOKEN), so the service acts for this server's user and
nobody else. The service's refusals come back as HiveErrors with its status and message,
and the server's kernel manager (server/kernel_manager.py) answers them as JSON errors
with that status.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ..errors import HiveError, NotFound, Unavailable
from ..kernels.team import TeamProvisioner


class ServiceError(HiveError):
    """The service refused a call: its status and its message."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServiceLink:
    """Calls `<service_url>api/<path>` with the server's Hub token."""

    def __init__(self, service_url: str, token: str | None = None, timeout: float = 90) -> None:
        self.base = service_url.rstrip("/") + "/api/"
        self.token = token
        self.timeout = timeout

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        token = self.token if self.token is not None else os.environ.get("JUPYTERHUB_API_TOKEN", "")
        payload = json.dumps(body).encode() if body is not None else None
        request = HTTPRequest(
            self.base + path, method=method, body=payload if method != "GET" else None,
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
            request_timeout=self.timeout, allow_nonstandard_methods=True,
        )  # fmt: skip
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except OSError as error:
            raise Unavailable(f"The gpuhive service cannot be reached: {error}") from None
        if response.code == 599:
            raise Unavailable(f"The gpuhive service cannot be reached: {response.error}")
        try:
            data = json.loads(response.body) if response.body else None
        except ValueError:
            data = None
        if response.code >= 400:
            message = data.get("message") if isinstance(data, dict) else None
            text = str(message or f"The gpuhive service answered {response.code}.")
            if response.code == 404:
                raise NotFound(text)
            raise ServiceError(text, response.code)
        return data


def install(serverapp: Any, service_url: str) -> ServiceLink:
    """Give the kernel manager (a GpuHiveKernelManager) the link and the team's provisioner;
    its refusals become JSON errors with their status there."""
    link = ServiceLink(service_url)
    manager = serverapp.kernel_manager
    if hasattr(manager, "gpuhive_service"):  # not behind a kernel gateway
        manager.gpuhive_service = link  # what TeamProvisioner calls
        manager.gpuhive_provisioner = TeamProvisioner  # what the gpuhive provisioner becomes
    return link
