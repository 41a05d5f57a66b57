"""Only a reservation kernel's owner (or an admin) may start, restart, interrupt, shut down or
attach to it; refusals are JSON 403s that say whose kernel it is.

jupyter_server passes no user to its kernel manager, so the guard reads the requesting user
from the request's CallContext, as gpuhive names them. Two places check:

- the server's authorizer, for every request on api/kernels/<id>/… (restart answers any
  exception of the kernel manager with a bare 500, so its check must come first; the
  channels websocket, i.e. attaching, is checked there too), and
- the kernel manager's start/restart/interrupt/shutdown, for the other ways in (a session's
  DELETE shuts its kernel down); there a domain error from the provisioner (a refusal, a
  reservation outside its time, a host without ipykernel) becomes its HTTP status.

Calls outside a request (the culler, the auto-restarter, server shutdown) and gpuhive's own
actions (`kernels.registry.internal()`: the end policy) are not checked.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from jupyter_server.base.call_context import CallContext
from tornado.web import HTTPError

from ..errors import HiveError
from ..hive import Hive
from ..kernels.registry import is_internal
from ..model import Identity

Resolve = Callable[[Any, Any], tuple[str, list[str] | None]]
ACTIONS = {"interrupt": "interrupt", "restart": "restart", "channels": "attach to"}


def install(serverapp: Any, hive: Hive, resolve: Resolve) -> None:
    """Wire the hive's kernel registry into the server: requester, manager, the checks."""
    registry = hive.kernels
    manager = serverapp.kernel_manager

    def identity(user: Any, handler: Any) -> Identity:
        name, groups = resolve(user, handler.identity_provider)
        return hive.identities.identify(name, groups)

    def requester() -> Identity | None:
        handler = CallContext.get(CallContext.JUPYTER_HANDLER)
        user = getattr(handler, "current_user", None) if handler is not None else None
        return None if user is None else identity(user, handler)

    def check(kernel_id: str | None, action: str) -> None:
        if kernel_id is None or is_internal() or registry.get(kernel_id) is None:
            return  # not a reservation kernel: nothing to check (and no identity to look up)
        who = requester()
        if who is None:
            return
        try:
            registry.check(kernel_id, who, action)
        except HiveError as error:
            raise HTTPError(error.status, str(error)) from None

    registry.requester = requester
    registry.manager = manager
    manager.gpuhive_kernels = registry  # how provisioners find the registry

    def guarded(name: str, action: str, pick: Callable[..., str | None]) -> None:
        original = getattr(manager, name)

        @functools.wraps(original)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            check(pick(*args, **kwargs), action)
            try:
                result = original(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result
            except HiveError as error:
                answer_session(error)
                raise HTTPError(error.status, str(error)) from None

        setattr(manager, name, wrapper)

    def first(kernel_id: str | None = None, *args: Any, **kwargs: Any) -> str | None:
        return kernel_id

    guarded("start_kernel", "attach to", lambda **kw: kw.get("kernel_id"))
    guarded("restart_kernel", "restart", first)
    guarded("interrupt_kernel", "interrupt", first)
    guarded("shutdown_kernel", "shut down", first)

    authorizer = serverapp.web_app.settings.get("authorizer") or serverapp.authorizer
    is_authorized = authorizer.is_authorized

    def authorize(handler: Any, user: Any, action: str, resource: str) -> Any:
        kernel_id = (getattr(handler, "path_kwargs", None) or {}).get("kernel_id")
        if resource == "kernels" and kernel_id and action != "read":
            verb = (handler.path_kwargs or {}).get("action")
            if verb is None:
                verb = "attach to" if "channels" in handler.request.path else "shut down"
            if not is_internal() and registry.get(kernel_id) is not None:
                try:
                    registry.check(kernel_id, identity(user, handler), ACTIONS.get(verb, verb))
                except HiveError as error:
                    raise HTTPError(error.status, str(error)) from None
        return is_authorized(handler, user, action, resource)

    authorizer.is_authorized = authorize


def answer_session(error: HiveError) -> None:
    """POST api/sessions (how JupyterLab opens a notebook) turns every error of a kernel
    start into a 500: answer the refusal with its own status and message first."""
    handler = CallContext.get(CallContext.JUPYTER_HANDLER)
    if type(handler).__name__ == "SessionRootHandler" and not handler._finished:
        handler.set_status(error.status)
        handler.set_header("Content-Type", "application/json")
        handler.finish(json.dumps({"message": str(error), "reason": None}))
