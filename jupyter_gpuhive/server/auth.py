"""A token → user identity provider: several named users on one Jupyter server.

Each configured token stands for one user with groups. Tests use it to act as several
people, and a small site can use it the same way:

    c.ServerApp.identity_provider_class = "jupyter_gpuhive.auth.TokenUsersIdentityProvider"
    c.TokenUsersIdentityProvider.users = {"s3cret-token": {"name": "alice", "groups": ["phd"]}}

A user logs in to the browser by typing their token into the login form (or by opening a
URL with `?token=…`); the login cookie then stands for that token: every cookie request
has the token's current name and groups, and a session ends when its token is removed
from `users`. Requests with the server's own token (or its cookie) keep the default
behaviour: the server's own (anonymous) user.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web
from traitlets import Dict

# The key in the login cookie that says "this session came from one of `users`' tokens".
_COOKIE_KEY = "gpuhive_token"


@dataclass
class GroupUser(User):
    """A jupyter_server User that also carries group names."""

    groups: list[str] = field(default_factory=list)
    # Which configured token this user came from (a digest, never the token): the login
    # cookie carries it so that a cookie session is that token's identity.
    token_digest: str = field(default="", repr=False)


def _digest(token: str) -> str:
    return hashlib.sha256(b"gpuhive-login:" + token.encode()).hexdigest()


class TokenUsersIdentityProvider(IdentityProvider):
    """Maps bearer tokens (and login cookies made from them) to named users with groups."""

    users = Dict(help="Tokens to users: {token: {'name': 'alice', 'groups': ['phd']}}.").tag(
        config=True
    )

    def _user(self, token: str, spec: dict[str, Any]) -> GroupUser:
        name = str(spec["name"])
        groups = [str(g) for g in spec.get("groups", [])]
        return GroupUser(username=name, name=name, groups=groups, token_digest=_digest(token))

    def _lookup(self, token: str) -> GroupUser | None:
        for known, spec in self.users.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return self._user(known, spec)
        return None

    def _by_digest(self, digest: str) -> GroupUser | None:
        for known, spec in self.users.items():
            if hmac.compare_digest(_digest(known).encode(), digest.encode()):
                return self._user(known, spec)
        return None

    async def get_user_token(self, handler: web.RequestHandler) -> User | None:
        """The user of a token in the Authorization header or the URL."""
        token = self.get_token(handler)
        if token:
            found = self._lookup(token)
            if found is not None:
                return found
        return await super().get_user_token(handler)

    def user_to_cookie(self, user: User) -> str:
        """The login cookie: jupyter_server's fields, plus which token it stands for."""
        data = json.loads(super().user_to_cookie(user))
        if isinstance(user, GroupUser) and user.token_digest:
            data[_COOKIE_KEY] = user.token_digest
        return json.dumps(data)

    def user_from_cookie(self, cookie_value: str) -> User | None:
        """A cookie made from a configured token is that token's user as configured now."""
        data = json.loads(cookie_value)
        digest = data.get(_COOKIE_KEY) if isinstance(data, dict) else None
        if digest is None:
            return super().user_from_cookie(cookie_value)
        # None when the token was removed from `users`: the session ends with its token.
        return self._by_digest(str(digest))

    def identity_model(self, user: User) -> dict[str, Any]:
        """What jupyter_server's /api/me shows: the user's fields, never the token digest."""
        model = asdict(user)
        model.pop("token_digest", None)
        return model

    def process_login_form(self, handler: web.RequestHandler) -> User | None:
        """The login form accepts a user's token, or the server's own token."""
        typed = handler.get_argument("password", default="")
        if not typed:
            return None
        found = self._lookup(typed)
        if found is not None:
            return found
        if self.token and hmac.compare_digest(self.token.encode(), typed.encode()):
            return self.generate_anonymous_user(handler)
        return None
