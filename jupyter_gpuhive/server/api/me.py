"""REST handlers of the requester: who they are, and whether gpuhive can log in as them."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...model.authority import READ
from .base import HiveLogic
from .operations import operation
from .schemas import replies


class MeHandler(HiveLogic):
    auth_resource = "gpuhive:me"

    @web.authenticated
    @authorized(READ)
    @operation("Who am I: name, groups, admin flag", reply=replies.IdentityReply)
    async def get(self) -> None:
        self.reply(await self.hive.identities.me(self.who))


class SshHandler(HiveLogic):
    auth_resource = "gpuhive:me"

    @web.authenticated
    @authorized(READ)
    @operation(
        "The public key to add to ~/.ssh/authorized_keys, and per SSH host whether gpuhive can "
        "already log in as me (needed to run my jobs)"
    )
    async def get(self) -> None:
        self.reply(await self.hive.jobs.ssh_status(self.who))
