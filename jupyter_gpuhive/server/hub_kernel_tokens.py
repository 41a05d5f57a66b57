"""Team mode: the GPUHIVE_URL and GPUHIVE_TOKEN of a reservation kernel the service starts.

What a kernel in personal mode gets (`kernel_tokens`), for the service: a random token that
opens gpuhive's API, nothing else, as the kernel's owner, for as long as the kernel lives.
Neither the service's own token nor the owner's server token goes to the kernel (the
server token opens the user's whole Jupyter server; a GPU host's root could read it).

The service keeps, per kernel, the owner's server token that launched it and stands the
kernel token in for it: every request with a kernel token is asked of the Hub as that server
token (reads cached as usual, writes afresh), so the kernel is worth what the owner's server
is worth in gpuhive at that moment, and nothing once the server stops (its token is revoked)
or the kernel ends. A kernel token cannot start or control kernels (that is the server's).

GPUHIVE_URL is the service as the Hub publishes it (`JUPYTERHUB_PUBLIC_URL`, set by
`c.JupyterHub.public_url`): a GPU host reaches the service only through the Hub's proxy.
Without it the kernel gets neither variable (an address guessed from a request could be a
port on the GPU host that anybody there could open).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from ..kernels.registry import KernelRegistry
from ..model.kernel import ENV_TOKEN, ENV_URL
from . import public_url
from .kernel_tokens import PREFIX

SETTING = "gpuhive_service_kernel_tokens"  # the service's KernelTokens, in its app settings


@dataclass
class Held:
    """A kernel token: the kernel, its owner and the server token it stands in for."""

    kernel_id: str
    owner: str
    hub_token: str


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class ServiceKernelTokens:
    """Kernel tokens of the service's brokered kernels; in memory, one per kernel."""

    def __init__(self, registry: KernelRegistry) -> None:
        self.registry = registry
        self._held: dict[bytes, Held] = {}
        self._kernels: dict[str, str] = {}  # kernel id -> its token

    def env(
        self, kernel_id: str, owner: str, hub_token: str, environ: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """GPUHIVE_URL and GPUHIVE_TOKEN for the kernel ({} without a public URL)."""
        url = public_url.configured() if environ is None else public_url.configured(environ)
        if url is None or not hub_token:
            return {}
        token = self._kernels.get(kernel_id)
        held = self._held.get(_digest(token)) if token else None
        if held is not None and held.owner != owner:
            return {}  # another user's kernel: the broker refuses this launch
        if token is None or held is None:
            token = PREFIX + secrets.token_urlsafe(32)
            self._kernels[kernel_id] = token
        self._held[_digest(token)] = Held(kernel_id, owner, hub_token)  # a restart's server token
        return {ENV_URL: url, ENV_TOKEN: token}

    def launch_failed(self, kernel_id: str) -> None:
        """A launch was refused or failed: its token goes unless its kernel runs on."""
        record = self.registry.get(kernel_id)
        if record is None or not record.live:
            self.revoke(kernel_id)

    def resolve(self, token: str) -> Held | None:
        """Who a kernel token stands for; None once its kernel ended (or for anything else)."""
        if not token.startswith(PREFIX):
            return None
        held = self._held.get(_digest(token))
        if held is None:
            return None
        record = self.registry.get(held.kernel_id)
        if record is None or not record.live or record.owner != held.owner:
            self.revoke(held.kernel_id)  # ended (its server may never have said so)
            return None
        return held

    def revoke(self, kernel_id: str) -> None:
        """The kernel ended: its token opens nothing from now on."""
        token = self._kernels.pop(kernel_id, None)
        if token is not None:
            self._held.pop(_digest(token), None)

    def __len__(self) -> int:
        return len(self._held)
