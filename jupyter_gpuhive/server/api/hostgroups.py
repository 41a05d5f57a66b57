"""REST handlers of host groups: who administers which hosts, and what those administrators
set for their group's hosts only, limits and no-show times (bookings/hostgroups.py)."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...bookings.hostgroups import HostGroupService
from ...model.authority import READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas import hostgroups as hg
from .schemas.fairshare import LimitValues


class HostGroupLogic(HiveLogic):
    auth_resource = "gpuhive:host-groups"

    @property
    def groups(self) -> HostGroupService:
        return self.hive.fairshare.host_groups


class HostGroupsHandler(HostGroupLogic):
    @web.authenticated
    @authorized(READ)
    @operation(
        "Host groups: their administrators, hosts, limits and no-show settings",
        reply=hg.HostGroupList,
    )
    async def get(self) -> None:
        self.reply({"host_groups": await self.hive.run(self.groups.listed)})


class HostGroupHandler(HostGroupLogic):
    @web.authenticated
    @authorized(READ)
    @operation("One host group", reply=hg.HostGroupReply, errors=(404,))
    async def get(self, group: str) -> None:
        self.reply(await self.hive.run(self.groups.one, group))


class HostGroupLimitsHandler(HostGroupLogic):
    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Set the limits of each user's bookings on a host group's hosts, counting what they "
        "hold there (the group's administrators, site admins); bookings now over them are "
        "flagged, never deleted",
        body=LimitValues,
        reply=hg.HostGroupReply,
        errors=(404,),
    )
    async def put(self, group: str) -> None:
        limits = self.body(LimitValues).value()
        self.reply(await self.hive.fairshare.set_group_limits(self.who, group, limits))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Forget a host group's limits (the group's administrators, site admins)",
        reply=hg.HostGroupReply,
        errors=(404,),
    )
    async def delete(self, group: str) -> None:
        self.reply(await self.hive.fairshare.set_group_limits(self.who, group, None))


class HostGroupNoShowHandler(HostGroupLogic):
    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Set the no-show times on a host group's hosts (the group's administrators, site admins)",
        body=hg.NoShowBody,
        reply=hg.HostGroupReply,
        errors=(404,),
    )
    async def put(self, group: str) -> None:
        times = self.body(hg.NoShowBody).value()
        self.reply(await self.hive.run(self.groups.set_noshow, self.who, group, times))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Forget a host group's no-show times: the site's apply there again",
        reply=hg.HostGroupReply,
        errors=(404,),
    )
    async def delete(self, group: str) -> None:
        self.reply(await self.hive.run(self.groups.set_noshow, self.who, group, None))
