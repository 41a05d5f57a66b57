"""REST handlers of brokered kernels: the team-mode service runs a user's server's kernel.

Only the service has a broker (server/hub.py); elsewhere these answer 404. Who may do what
is the broker's to decide (kernels/broker.py): a launch only the owner, the rest the owner
or an admin.
"""

from __future__ import annotations

import re

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...errors import Forbidden, NotFound
from ...kernels.broker import KernelBroker
from ...model.authority import EXECUTE, READ
from ..hub_kernel_tokens import SETTING as KERNEL_TOKENS
from ..hub_kernel_tokens import ServiceKernelTokens
from .base import HiveLogic
from .operations import operation
from .schemas import brokered as bs

KERNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
ERRORS = (404, 409, 503)


class _Brokered(HiveLogic):
    runs_to_the_end = True  # a kernel started or signalled on a host must be recorded

    def broker(self, kernel_id: str) -> KernelBroker:
        broker = self.settings.get("gpuhive_broker")
        if broker is None:
            raise NotFound(
                "This server starts its kernels itself: brokered kernels are the team-mode "
                "service's (c.GpuHiveApp.service_url)."
            )
        if not KERNEL_ID.fullmatch(kernel_id):
            raise NotFound("A kernel id is a Jupyter kernel's id (letters, digits, '-').")
        if getattr(self, "kernel_token", None) is not None:
            raise Forbidden("A kernel's own token cannot start or control kernels.")
        return broker  # type: ignore[no-any-return]

    def kernel_env(self, kernel_id: str) -> dict[str, str]:
        """The service's GPUHIVE_URL/GPUHIVE_TOKEN for the kernel (hub_kernel_tokens)."""
        tokens: ServiceKernelTokens | None = self.settings.get(KERNEL_TOKENS)
        if tokens is None:
            return {}
        return tokens.env(kernel_id, self.who.name, str(getattr(self, "hub_token", "")))

    def forget_token(self, kernel_id: str, *, failed: bool = False) -> None:
        """The kernel ended (or, `failed`, its launch did): its token opens nothing now."""
        tokens: ServiceKernelTokens | None = self.settings.get(KERNEL_TOKENS)
        if tokens is not None:
            (tokens.launch_failed if failed else tokens.revoke)(kernel_id)


class LaunchHandler(_Brokered):
    auth_resource = "gpuhive:kernels"

    @web.authenticated
    @authorized(EXECUTE)
    @operation(
        "Team mode: start (or restart) my kernel on my reservation; the answer holds its "
        "private socket paths and HMAC key for my server's kernel manager (owner only)",
        body=bs.LaunchBody,
        reply=bs.LaunchReply,
        errors=ERRORS,
    )
    async def post(self, kernel_id: str) -> None:
        broker = self.broker(kernel_id)
        body = self.body(bs.LaunchBody)
        env = {**body.env, **self.kernel_env(kernel_id)}  # ours win over the server's
        try:
            answer = await broker.launch(self.who, kernel_id, body.reservation_id, body.host,
                                         env)  # fmt: skip
        except BaseException:
            self.forget_token(kernel_id, failed=True)
            raise
        self.reply(answer)


class ProcessHandler(_Brokered):
    auth_resource = "gpuhive:kernels"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Team mode: whether my kernel's process runs, and why it ended (owner or admin)",
        reply=bs.ProcessReply,
        errors=ERRORS,
    )
    async def get(self, kernel_id: str) -> None:
        self.reply(await self.broker(kernel_id).process(self.who, kernel_id))


class SignalHandler(_Brokered):
    auth_resource = "gpuhive:kernels"

    @web.authenticated
    @authorized(EXECUTE)
    @operation(
        "Team mode: send a signal (SIGINT interrupts) to my kernel's process group (owner or "
        "admin)",
        body=bs.SignalBody,
        reply=bs.ProcessReply,
        errors=ERRORS,
    )
    async def post(self, kernel_id: str) -> None:
        broker = self.broker(kernel_id)
        name = self.body(bs.SignalBody).signal
        self.reply(await broker.signal(self.who, kernel_id, name))


class CleanupHandler(_Brokered):
    auth_resource = "gpuhive:kernels"

    @web.authenticated
    @authorized(EXECUTE)
    @operation(
        "Team mode: my kernel's process ended or is to end now: stop it and drop its sockets "
        "(owner or admin)",
        body=bs.CleanupBody,
        reply=bs.ProcessReply,
        errors=ERRORS,
    )
    async def post(self, kernel_id: str) -> None:
        broker = self.broker(kernel_id)
        restart = self.body(bs.CleanupBody).restart
        self.reply(await broker.cleanup(self.who, kernel_id, restart))
        if not restart:
            self.forget_token(kernel_id)
