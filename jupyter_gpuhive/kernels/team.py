"""The `gpuhive` provisioner in a client-mode server: the team's service runs the kernel.

A user's server in team mode holds no SSH key and no hosts. This provisioner (what
`GpuHiveProvisioner` becomes in a client-mode server: server/service_link.py) asks the
gpuhive service, with the user's own Hub token, to launch the kernel (`kernels/broker.py`):
the service decides the owner (the Hub user), checks the reservation, starts the kernel and
answers with Unix socket paths in a 0700 directory of the user's UNIX account and the
kernel's HMAC key. The kernel manager connects to those sockets (transport "ipc"). Polls,
signals (interrupt, kill) and clean-ups go to the service as well. The sockets exist only on
the service's machine: a server elsewhere gets a clear refusal (docs/how-to/kernels.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal as signals
from typing import Any, Protocol

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from traitlets import Integer, Unicode

from ..errors import HiveError, Invalid, NotFound, Unavailable
from .provisioner import PASSED_ON, settle_after_restart
from .restarts import end_for_good

log = logging.getLogger(__name__)
LIVE_STATES = ("starting", "running", "restarting")


class ServiceLink(Protocol):
    """How a client-mode server calls its gpuhive service as its user (server/service_link)."""

    async def call(self, method: str, path: str, body: Any = None) -> Any: ...


def find_link(provisioner: Any) -> ServiceLink | None:
    """The service link handed to the kernel's own manager, the provisioner's parent, by a
    client-mode server's kernel manager (server/kernel_manager.py); None: not in client mode."""
    return getattr(provisioner.parent, "gpuhive_service", None)


class TeamProvisioner(KernelProvisionerBase):  # type: ignore[misc]
    """Starts the kernel through the team's gpuhive service; connects to private sockets.

    Not a subclass of GpuHiveProvisioner (which builds it in a client-mode server): it
    shares its kernelspec config, and nothing of how a kernel is started.
    """

    reservation_id = Integer(None, allow_none=True, help="The reservation of the kernel.")
    host = Unicode(None, allow_none=True, help="Which host of a reservation on several.")

    _env: dict[str, str] | None = None
    _rid: int | None = None
    _launches = 0
    _running = False
    _dead_reason: str | None = None

    def __init__(self, **kwargs: Any) -> None:
        # The service's settings decide timeouts: other config of the spec is not ours.
        known = {"kernel_id", "kernel_spec", "parent", "config", "log", "reservation_id", "host"}
        super().__init__(**{k: v for k, v in kwargs.items() if k in known})

    @property
    def has_process(self) -> bool:
        return self._running

    @property
    def link(self) -> ServiceLink:
        link = find_link(self)
        if link is None:
            raise Unavailable("This server has no gpuhive service to start kernels through.")
        return link

    def _path(self, what: str) -> str:
        return f"kernels/{self.kernel_id}/{what}"

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        env_in: dict[str, str] = dict(kwargs.pop("env", None) or {})
        kwargs.pop("extra_arguments", None)
        if self._rid is None:
            rid = self.reservation_id  # the spec's only: a start's env is the server's own
            if rid is None:
                raise Invalid("This kernelspec names no reservation (config.reservation_id).")
            self._rid = rid
        env = {k: str(v) for k, v in (getattr(self.kernel_spec, "env", None) or {}).items()}
        env.update({k: env_in[k] for k in PASSED_ON if env_in.get(k)})
        self._env = env
        kwargs["env"] = {}
        kwargs["cmd"] = ["ipykernel", "through", "the gpuhive service"]  # shown in logs only
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        body = {"reservation_id": self._rid, "host": self.host, "env": self._env or {}}
        reply = await self.link.call("POST", self._path("launch"), body)
        conn = dict(reply["connection"])
        if not os.path.exists(f"{conn['ip']}-1"):  # noqa: ASYNC240 - one stat, no I/O wait
            await self._forget()
            raise Unavailable(
                "The gpuhive service started the kernel, but its sockets are on the service's "
                "machine and this server runs elsewhere: kernels on reservations in team mode "
                "need users' servers on the service's machine (JupyterHub's local spawners)."
            )
        conn["key"] = str(conn["key"]).encode()
        self._running, self._dead_reason = True, None
        self.connection_info = conn  # type: ignore[assignment]  # a KernelConnectionInfo
        return self.connection_info

    async def post_launch(self, **kwargs: Any) -> None:
        """After a restart, wait until the new kernel answers on iopub (as the provisioner
        that runs kernels itself does: else a notebook can miss a restart's first output)."""
        self._launches += 1
        km = self.parent
        if self._launches < 2 or km is None:
            return
        await settle_after_restart(km)

    async def _forget(self) -> None:
        try:
            await self.link.call("POST", self._path("cleanup"), {"restart": False})
        except HiveError as error:
            log.info("gpuhive: cleanup of kernel %s: %s", self.kernel_id, error)

    async def poll(self) -> int | None:
        if not self._running:
            return 0
        try:
            state = await self.link.call("GET", self._path("process"))
        except NotFound:
            gone = "the gpuhive service no longer runs this kernel (was it restarted?)"
            state = {"exit_status": 255, "state": "dead", "reason": gone}
        except HiveError as error:  # the service is unreachable now: the kernel may be fine
            log.info("gpuhive: poll of kernel %s: %s", self.kernel_id, error)
            return None
        code = state.get("exit_status")
        if code is not None and state.get("state") not in LIVE_STATES and not self._dead_reason:
            # Ended by the service (end policy, lost host): no auto-restart, and say why.
            self._dead_reason = str(state.get("reason") or "ended by the gpuhive service")
            end_for_good(self, self._dead_reason)
        return None if code is None else int(code)

    async def wait(self) -> int | None:
        while (code := await self.poll()) is None:  # noqa: ASYNC110 - polled, as LocalProvisioner
            await asyncio.sleep(0.2)
        self._running = False
        return code

    async def send_signal(self, signum: int) -> None:
        if self._running:
            name = signals.Signals(signum).name
            await self.link.call("POST", self._path("signal"), {"signal": name})

    async def cleanup(self, restart: bool = False) -> None:
        self._running = False
        with contextlib.suppress(NotFound):
            await self.link.call("POST", self._path("cleanup"), {"restart": restart})

    async def kill(self, restart: bool = False) -> None:
        await self.send_signal(signals.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        await self.send_signal(signals.SIGTERM)

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return max(recommended, 2.0)

    async def get_provisioner_info(self) -> dict[str, Any]:
        info = await super().get_provisioner_info()
        info.update(reservation_id=self._rid, host=self.host, brokered=True)
        return info
