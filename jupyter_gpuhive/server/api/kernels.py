"""REST handlers of kernels on reservations: list them, and choose their end policy."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...model.authority import READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas import kernels as ks


class KernelsHandler(HiveLogic):
    auth_resource = "gpuhive:kernels"

    @web.authenticated
    @authorized(READ)
    @operation(
        "My kernels on reservations (admins: everyone's): host, GPUs, the reservation's end, "
        "the end policy, and the policies the site allows",
        reply=ks.KernelList,
    )
    async def get(self) -> None:
        self.reply(await self.hive.kernel_life.view(self.who))


class KernelHandler(HiveLogic):
    auth_resource = "gpuhive:kernels"

    @web.authenticated
    @authorized(READ)
    @operation("One kernel on a reservation (its owner and admins)", reply=ks.KernelReply,
               errors=(404,))  # fmt: skip
    async def get(self, kernel_id: str) -> None:
        self.reply(await self.hive.kernel_life.one(self.who, kernel_id))


class KernelPolicyHandler(HiveLogic):
    auth_resource = "gpuhive:kernels"

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Choose what happens to a kernel when its reservation ends: warn, interrupt, shutdown "
        "or extend (with a fallback), within what the site allows",
        body=ks.KernelPolicyBody,
        reply=ks.KernelReply,
        errors=(404,),
    )
    async def put(self, kernel_id: str) -> None:
        policy, fallback = self.body(ks.KernelPolicyBody).value()
        self.hive.kernel_life.choose(self.who, kernel_id, policy, fallback)
        self.reply(await self.hive.kernel_life.one(self.who, kernel_id))
