"""Kernel tokens: how a kernel finds its gpuhive server without carrying the server's token.

The server's own token never reaches a kernel: under an identity provider with several users
it is worth the server's account, which gpuhive takes for the OS user (root, for a server run
as root). Each kernel gets, at launch, `GPUHIVE_URL` and a random `GPUHIVE_TOKEN` bound to the
user who started it. Only gpuhive's own REST handlers accept it (`api.base.HiveHandler`), as
that user; Jupyter's other APIs refuse it, since it is no token of theirs. It is forgotten
when the kernel shuts down, or when the server stops.

The server's secrets are also taken out of the environment a kernel starts with. This keeps a
kernel from *carrying* more than its user's rights; it does not isolate users: every kernel of
one Jupyter server runs as the server's UNIX user and can read that user's files (the runtime
file with the server's token, for one). Separate UNIX users need JupyterHub.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_server.auth.identity import User
from jupyter_server.base.call_context import CallContext

from ..model.kernel import ENV_TOKEN, ENV_URL

PREFIX = "gpuhive-kernel-"
SETTING = "gpuhive_kernel_tokens"  # the KernelTokens of a server, in its web app settings
# The server's secrets by name; JupyterHub's tokens are kept for the server's own user.
SERVER_SECRETS = ("JUPYTER_TOKEN", "JUPYTER_PASSWORD", ENV_TOKEN)
HUB_SECRETS = ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN")

# Who a Jupyter user is to gpuhive: (name, groups); see HiveHandler.gpuhive_user.
Resolve = Callable[[Any, Any], tuple[str, list[str] | None]]


@dataclass
class KernelUser(User):
    """The user a kernel token stands for, as gpuhive named them when the kernel started."""

    groups: list[str] | None = None  # None: the provider said nothing about groups


class KernelTokens:
    """Random tokens, each bound to one user and (once started) one kernel; kept in memory."""

    def __init__(self) -> None:
        self._users: dict[bytes, KernelUser] = {}
        self._kernels: dict[str, bytes] = {}

    def issue(self, name: str, groups: list[str] | None) -> str:
        """A new token for `name`."""
        token = PREFIX + secrets.token_urlsafe(32)
        known = None if groups is None else list(groups)
        self._users[_digest(token)] = KernelUser(username=name, groups=known)
        return token

    def bind(self, token: str, kernel_id: str) -> None:
        """Remember which kernel holds `token` (it is revoked with the kernel)."""
        self._kernels[kernel_id] = _digest(token)

    def revoke(self, token: str) -> None:
        self._users.pop(_digest(token), None)

    def revoke_kernel(self, kernel_id: str) -> None:
        digest = self._kernels.pop(kernel_id, None)
        if digest is not None:
            self._users.pop(digest, None)

    def user(self, token: str) -> KernelUser | None:
        """The user of a kernel token; None for anything else (other tokens included)."""
        if not token.startswith(PREFIX):
            return None
        return self._users.get(_digest(token))

    def __len__(self) -> int:
        return len(self._users)


def _digest(token: str) -> bytes:
    # Looked up by digest: the dictionary never compares secrets byte by byte.
    return hashlib.sha256(token.encode()).digest()


def kernel_env(
    base: Mapping[str, str],
    server_token: str,
    *,
    url: str | None = None,
    token: str | None = None,
    keep_hub: bool = False,
) -> dict[str, str]:
    """`base` without the server's secrets, plus GPUHIVE_URL/GPUHIVE_TOKEN when given.

    Removed: SERVER_SECRETS by name, HUB_SECRETS unless `keep_hub`, our own two names, and
    every variable whose value holds the server's token.
    """
    dropped = {*SERVER_SECRETS, ENV_URL, *(() if keep_hub else HUB_SECRETS)}
    env = {
        name: value
        for name, value in base.items()
        if name not in dropped and not _holds(value, server_token)
    }
    if url and token:
        env[ENV_URL], env[ENV_TOKEN] = url, token
    return env


def _holds(value: str, secret: str) -> bool:
    if not secret:
        return False
    if len(secret) < 8:  # too short to look for inside other values
        return hmac.compare_digest(value.encode(), secret.encode())
    return secret in value


class LaunchTokens:
    """What a kernel launch gets: an environment without the server's secrets, and a kernel
    token for the requester; `GpuHiveKernelManager` calls it (server/kernel_manager.py)."""

    def __init__(self, serverapp: Any, resolve: Resolve) -> None:
        self.tokens = KernelTokens()
        self.server_token = str(getattr(serverapp.identity_provider, "token", "") or "")
        self.url = str(serverapp.connection_url)
        self.resolve = resolve

    def launch_env(self, base: Mapping[str, str] | None) -> tuple[dict[str, str], str | None]:
        """The environment of a new kernel, and the token issued to the requesting user."""
        handler = CallContext.get(CallContext.JUPYTER_HANDLER)
        user = getattr(handler, "current_user", None) if handler is not None else None
        token = None
        keep_hub = False
        if user is not None:
            name, groups = self.resolve(user, handler.identity_provider)
            token = self.tokens.issue(name, groups)
            keep_hub = name == os.environ.get("JUPYTERHUB_USER")
        env = kernel_env(
            os.environ if base is None else base,
            self.server_token,
            url=self.url,
            token=token,
            keep_hub=keep_hub,
        )
        return env, token

    def restart_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A renamed session's {**os.environ, …} for the next restart, without secrets (and
        without our own two variables: the kernel keeps those it started with)."""
        return kernel_env(env, self.server_token)
