"""Published path of the identity provider that Jupyter configs name; see server/auth.py."""

from .server.auth import GroupUser, TokenUsersIdentityProvider

__all__ = ["GroupUser", "TokenUsersIdentityProvider"]
