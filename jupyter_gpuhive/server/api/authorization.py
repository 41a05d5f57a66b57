"""Every route through the server's Authorizer: gpuhive's declared policy, then the site's.

Each handler class declares its `auth_resource` ('gpuhive:reservations') and wraps each
method in jupyter_server's `@authorized(action)`, as the server's own handlers do. The
decorator asks the handler's `authorizer`, which for gpuhive's handlers is a
`RouteAuthorizer`:

1. gpuhive's policy (model/authority.py) refuses what the requester may never do there, with a
   sentence that says who may;
2. then the server's own Authorizer decides, as it does for contents or kernels: in a Jupyter
   server its configured `ServerApp.authorizer_class`, in team mode the Hub's scopes
   (server/hub.py, `HubScopes`).

A refusal is a 403 with a JSON message in both deployments.
"""

from __future__ import annotations

from types import CodeType
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized

from ...errors import Forbidden
from ...model.authority import Authority

# The code of jupyter_server's `@authorized` wrapper: a method that has it in its
# __wrapped__ chain goes through the authorizer (benchmarks/tenancy.py counts the others).
_AUTHORIZED: CodeType = authorized("read")(lambda self: None).__code__


class RouteAuthorizer:
    """The authorizer a gpuhive handler's `@authorized` asks (policy first, then the site's)."""

    def __init__(self, site: Any, authority: Authority) -> None:
        self.site = site
        self.authority = authority

    async def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        """True, or a Forbidden that says why (the decorator would only say 'not authorized')."""
        self.authority.route(handler.who, resource, action)
        if self.site is None:
            return True
        allowed = await ensure_async(self.site.is_authorized(handler, user, action, resource))
        if not allowed:
            raise Forbidden(
                f"This server's authorizer does not allow {handler.who.name} to {action} "
                f"{resource}; ask the site's administrators."
            )
        return True


def authorized_action(function: Any) -> str | None:
    """The action a handler method's `@authorized` declares (None: it has none)."""
    while function is not None:
        code = getattr(function, "__code__", None)
        if code is _AUTHORIZED:
            cells = dict(zip(code.co_freevars, function.__closure__ or (), strict=False))
            action = cells["action"].cell_contents if "action" in cells else None
            return str(action) if action else None
        function = getattr(function, "__wrapped__", None)
    return None
