"""A token → user identity provider: several named users on one Jupyter server.

Each configured token stands for one user with groups. Tests use it to act as several
people, and a small site can use it the same way:

    c.ServerApp.identity_provider_class = "jupyter_gpuhive.auth.TokenUsersIdentityProvider"
    c.TokenUsersIdentityProvider.users = {"s3cret-token": {"name": "alice", "groups": ["phd"]}}

Requests with the server's own token (or cookie) keep the default behaviour.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web
from traitlets import Dict


@dataclass
class GroupUser(User):
    """A jupyter_server User that also carries group names."""

    groups: list[str] = field(default_factory=list)


class TokenUsersIdentityProvider(IdentityProvider):
    """Maps bearer tokens to named users with groups."""

    users = Dict(help="Tokens to users: {token: {'name': 'alice', 'groups': ['phd']}}.").tag(
        config=True
    )

    def _lookup(self, token: str) -> GroupUser | None:
        for known, spec in self.users.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                name = str(spec["name"])
                return GroupUser(username=name, name=name, groups=list(spec.get("groups", [])))
        return None

    async def get_user_token(self, handler: web.RequestHandler) -> User | None:
        token = self.get_token(handler)
        if token:
            found = self._lookup(token)
            if found is not None:
                return found
        return await super().get_user_token(handler)
