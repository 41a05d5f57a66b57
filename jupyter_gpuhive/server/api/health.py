"""GET health (every GPU's health and drain) and POST health/drain (admins)."""

from __future__ import annotations

from typing import Annotated

from jupyter_server.auth.decorator import authorized
from pydantic import Field
from tornado import web

from ...model.authority import HEALTH, READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas.bodies import Closed


class DrainBody(Closed):
    """Drain a GPU for maintenance (no new bookings or jobs; holders told), or end a drain."""

    gpu: Annotated[str, Field(min_length=1, max_length=200, description="'host:index' or UUID")]
    drain: bool = Field(True, description="true: drain; false: take bookings again")
    reason: Annotated[str | None, Field(max_length=500, description="shown to users")] = None


class HealthHandler(HiveLogic):
    auth_resource = "gpuhive:health"

    @web.authenticated
    @authorized(READ)
    @operation("Every GPU and MIG slice: health (ok, degraded, failed, with reasons) and drain")
    async def get(self) -> None:
        self.reply({"gpus": await self.hive.monitor.health()})


class DrainHandler(HiveLogic):
    auth_resource = "gpuhive:health"

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Drain a GPU for maintenance or end its drain (admins; a host group's administrators, on "
        "its hosts); holders get a gpu.health event",
        body=DrainBody,
        errors=(403, 422),
    )
    async def post(self) -> None:
        body = self.body(DrainBody)
        where = self.hive.bookings.hosts_of([body.gpu])  # none: unknown, the drain says so
        if where:  # a host group's administrators: only on its hosts
            self.hive.bookings.authority.require(
                self.who, HEALTH, WRITE, hosts=where, thing=f"GPU {body.gpu} is on {min(where)}"
            )
        reason = body.reason.strip() if body.reason else None
        self.reply(await self.hive.monitor.drain(body.gpu, body.drain, self.who.name, reason))
