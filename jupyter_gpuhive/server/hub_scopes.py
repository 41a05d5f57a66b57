"""Team mode: JupyterHub's roles and scopes decide who uses gpuhive and who administers.

A site defines gpuhive's custom scopes at the Hub and grants them through roles
(docs/how-to/authorization.md has the configuration):

- `custom:gpuhive:use`: may use gpuhive at all, where the service requires it
  (`c.GpuHiveService.use_scope`; empty, the default: every Hub user the service admits);
- `custom:gpuhive:admin`: a site administrator of gpuhive;
- `custom:gpuhive:admin!group=G`: an administrator of host group G (its hosts only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import Forbidden

USE_SCOPE = "custom:gpuhive:use"
ADMIN_SCOPE = "custom:gpuhive:admin"
_GROUP_FILTER = ADMIN_SCOPE + "!group="


def groups_administered(scopes: Iterable[str]) -> list[str]:
    """The host groups a token's filtered admin scopes name (`custom:gpuhive:admin!group=G`)."""
    return [s[len(_GROUP_FILTER) :] for s in scopes if s.startswith(_GROUP_FILTER)]


class HubScopes:
    """The site authorizer of the service: the Hub's scopes, as `@authorized` asks for them."""

    def __init__(self, required: str = "") -> None:
        self.required = required

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        """Whether the token may use gpuhive (the use scope, or an admin scope of any kind)."""
        if not self.required:
            return True
        scopes = list((user or {}).get("scopes") or [])
        if self.required in scopes or ADMIN_SCOPE in scopes or groups_administered(scopes):
            return True
        raise Forbidden(
            f"{handler.who.name} may not {action} {resource}: this gpuhive needs the Hub scope "
            f"{self.required}, which none of their roles grants; ask the Hub's administrators "
            f"for a role with it."
        )
