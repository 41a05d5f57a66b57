"""GET health (every GPU's health and drain) and POST health/drain (admins)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from tornado import web

from .base import HiveLogic
from .operations import operation
from .schemas.bodies import Closed


class DrainBody(Closed):
    """Drain a GPU for maintenance (no new bookings or jobs; holders told), or end a drain."""

    gpu: Annotated[str, Field(min_length=1, max_length=200, description="'host:index' or UUID")]
    drain: bool = Field(True, description="true: drain; false: take bookings again")
    reason: Annotated[str | None, Field(max_length=500, description="shown to users")] = None


class HealthHandler(HiveLogic):
    @web.authenticated
    @operation("Every GPU and MIG slice: health (ok, degraded, failed, with reasons) and drain")
    async def get(self) -> None:
        self.reply({"gpus": await self.hive.monitor.health()})


class DrainHandler(HiveLogic):
    @web.authenticated
    @operation(
        "Drain a GPU for maintenance or end its drain (admin); holders get a gpu.health event",
        body=DrainBody,
        errors=(403, 422),
    )
    async def post(self) -> None:
        self.hive.bookings.require_admin(self.who, "drain a GPU or end its drain")
        body = self.body(DrainBody)
        reason = body.reason.strip() if body.reason else None
        self.reply(await self.hive.monitor.drain(body.gpu, body.drain, self.who.name, reason))
