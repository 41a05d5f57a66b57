"""Only a reservation kernel's owner (or an admin) may start, restart, interrupt, shut down or
attach to it; refusals are JSON 403s that say whose kernel it is.

jupyter_server passes no user to its kernel manager, so the guard reads the requesting user
from the request's CallContext, as gpuhive names them. Two places check, both classes the
server is configured with (server/kernel_manager.py mixes them into the configured ones):

- `KernelOwnerAuthorizer.is_authorized`, for every request on api/kernels/<id>/… (restart
  answers any exception of the kernel manager with a bare 500, so its check must come first;
  the channels websocket, i.e. attaching, is checked there too), and
- `GpuHiveKernelManager`'s start/restart/interrupt/shutdown, for the other ways in (a
  session's DELETE shuts its kernel down); there a domain error from the provisioner (a
  refusal, a reservation outside its time, a host without ipykernel) becomes its HTTP status.

Calls outside a request (the culler, the auto-restarter, server shutdown) and gpuhive's own
actions (`kernels.registry.internal()`: the end policy) are not checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jupyter_server.base.call_context import CallContext
from jupyter_server.services.sessions.handlers import SessionRootHandler
from tornado.web import HTTPError

from ..errors import HiveError
from ..hive import Hive
from ..kernels.registry import KernelRegistry, is_internal
from ..model import Identity

Resolve = Callable[[Any, Any], tuple[str, list[str] | None]]
ACTIONS = {"interrupt": "interrupt", "restart": "restart", "channels": "attach to"}
SETTING = "gpuhive_kernel_guard"  # the server's KernelGuard, in its web app settings


class KernelGuard:
    """Checks a request's user against the owner of a reservation kernel."""

    def __init__(self, hive: Hive, resolve: Resolve) -> None:
        self.hive = hive
        self.registry: KernelRegistry = hive.kernels
        self.resolve = resolve

    def identity(self, user: Any, handler: Any) -> Identity:
        """Who a Jupyter user is to gpuhive."""
        name, groups = self.resolve(user, handler.identity_provider)
        return self.hive.identities.identify(name, groups)

    def requester(self) -> Identity | None:
        """The user of the current request (None outside one)."""
        handler = CallContext.get(CallContext.JUPYTER_HANDLER)
        user = getattr(handler, "current_user", None) if handler is not None else None
        return None if user is None else self.identity(user, handler)

    def check(self, kernel_id: str | None, action: str) -> None:
        """HTTPError unless the current request's user may `action` the kernel."""
        if kernel_id is None or is_internal() or self.registry.get(kernel_id) is None:
            return  # not a reservation kernel: nothing to check (and no identity to look up)
        who = self.requester()
        if who is None:
            return
        try:
            self.registry.check(kernel_id, who, action)
        except HiveError as error:
            raise HTTPError(error.status, str(error)) from None

    def check_request(self, handler: Any, user: Any, action: str, resource: str) -> None:
        """HTTPError unless `user` may act on the kernel a kernels request names."""
        kernel_id = (getattr(handler, "path_kwargs", None) or {}).get("kernel_id")
        if resource != "kernels" or not kernel_id or action == "read":
            return
        verb = (handler.path_kwargs or {}).get("action")
        if verb is None:
            verb = "attach to" if "channels" in handler.request.path else "shut down"
        if is_internal() or self.registry.get(kernel_id) is None:
            return
        try:
            self.registry.check(kernel_id, self.identity(user, handler), ACTIONS.get(verb, verb))
        except HiveError as error:
            raise HTTPError(error.status, str(error)) from None


class KernelOwnerAuthorizer:
    """Mixed into the server's Authorizer class: the guard checks kernel requests first."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> Any:
        """Refuse other people's reservation kernels, then ask the configured authorizer."""
        guard = getattr(handler, "settings", {}).get(SETTING)
        if isinstance(guard, KernelGuard):
            guard.check_request(handler, user, action, resource)
        return super().is_authorized(handler, user, action, resource)  # type: ignore[misc]


def install(serverapp: Any, hive: Hive, resolve: Resolve) -> KernelGuard:
    """Hand the guard to the server's authorizer and kernel manager, and the manager to the
    hive's kernel registry."""
    guard = KernelGuard(hive, resolve)
    manager = serverapp.kernel_manager
    hive.kernels.requester = guard.requester
    hive.kernels.manager = manager
    serverapp.web_app.settings[SETTING] = guard
    if hasattr(manager, "gpuhive_guard"):  # a GpuHiveKernelManager (not behind a gateway)
        manager.gpuhive_guard = guard
        manager.gpuhive_kernels = hive.kernels  # how provisioners find the registry
    return guard


class SessionsHandler(SessionRootHandler):  # type: ignore[misc]
    """POST api/sessions (how JupyterLab opens a notebook) with a kernel start's refusal in
    its own status: jupyter_server's handler answers every error of a start as a 500 that
    carries the original (`raise HTTPError(500, ...) from error`). Registered by the
    extension on the same route, so it serves api/sessions (docs/architecture.md)."""

    ROUTE = r"/api/sessions/?"

    async def post(self) -> None:
        try:
            await super().post()  # type: ignore[misc]
        except HTTPError as error:
            cause = error.__cause__
            if error.status_code == 500 and isinstance(cause, HTTPError | HiveError):
                status = cause.status_code if isinstance(cause, HTTPError) else cause.status
                message = cause.log_message if isinstance(cause, HTTPError) else str(cause)
                raise HTTPError(status, message) from None
            raise
