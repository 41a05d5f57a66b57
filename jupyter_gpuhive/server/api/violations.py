"""REST handler of the violation history and the violations ongoing now."""

from __future__ import annotations

from datetime import timedelta

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...model import utcnow
from ...model.authority import READ
from .base import HiveLogic
from .operations import operation
from .schemas import queries


class ViolationsHandler(HiveLogic):
    auth_resource = "gpuhive:violations"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Violation history (foreign, unreserved, ghost, idle) with the actions taken, and those "
        "ongoing now: those the requester holds or caused (admins: all)",
        query=queries.ViolationsQuery,
    )
    async def get(self) -> None:
        q = self.query(queries.ViolationsQuery)
        end = q.end or utcnow() + timedelta(seconds=1)
        start = q.start or end - timedelta(days=7)
        report = await self.hive.protection.report(
            self.who,
            start,
            end,
            user=q.user,
            host=q.host,
            reservation_id=q.reservation,
            kinds=q.kind or None,
            limit=1000 if q.limit is None else q.limit,
        )
        self.reply(report)
