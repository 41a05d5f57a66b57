"""REST handlers of usage and fair share: GPU-hours used, limits and tiers, usage scores, the
accounting report."""

from __future__ import annotations

from datetime import date, timedelta

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...bookings.accounting import to_csv
from ...model import utcnow
from ...model.authority import READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas import fairshare as fs
from .schemas import queries


class UsageHandler(HiveLogic):
    auth_resource = "gpuhive:usage"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Reserved and used GPU-hours per GPU and for the site in a window; per user and per "
        "reservation: one's own rows (admins: all; see docs/privacy.md)",
        query=queries.UsageQuery,
    )
    async def get(self) -> None:
        q = self.query(queries.UsageQuery)
        end = q.end or utcnow()
        start = q.start or end - timedelta(days=7)
        self.reply(await self.hive.bookings.usage(self.who, start, end))


class LimitsHandler(HiveLogic):
    auth_resource = "gpuhive:limits"

    @web.authenticated
    @authorized(READ)
    @operation(
        "My limits, where each comes from and my current figures (admins: every limit)",
        reply=fs.LimitsReply,
    )
    async def get(self) -> None:
        self.reply(await self.hive.fairshare.view(self.who))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Set the limits of the site default, a group or a user (admin); reservations now over "
        "them are flagged, never deleted",
        body=fs.LimitsBody,
        reply=fs.LimitsChanged,
    )
    async def put(self) -> None:
        scope, name, limits = self.body(fs.LimitsBody).value()
        self.reply(await self.hive.fairshare.set(self.who, scope, name, limits))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Forget the stored limits of a scope (admin); configured ones apply again",
        query=fs.LimitScopeQuery,
        reply=fs.LimitsChanged,
        errors=(404,),
    )
    async def delete(self) -> None:
        q = self.query(fs.LimitScopeQuery)
        self.reply(await self.hive.fairshare.remove(self.who, q.scope or "", q.name or ""))


class TiersHandler(HiveLogic):
    auth_resource = "gpuhive:limits"

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Replace the efficiency tiers that scale limits (admin)",
        body=fs.TiersBody,
        reply=fs.LimitsChanged,
    )
    async def put(self) -> None:
        tiers = self.body(fs.TiersBody).value()
        self.reply(await self.hive.fairshare.set_tiers(self.who, tiers))


class ScoresHandler(HiveLogic):
    auth_resource = "gpuhive:usage"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Usage scores over a window: reserved, used (utilisation-weighted), reserved-but-idle "
        "GPU-hours, no-shows, violations caused, efficiency (one's own; admins: everyone's)",
        query=fs.ScoresQuery,
        reply=fs.ScoresReply,
    )
    async def get(self) -> None:
        q = self.query(fs.ScoresQuery)
        self.reply(await self.hive.fairshare.scores(self.who, q.days, q.user))


def _months(handler: HiveLogic) -> tuple[date, date | None]:
    q = handler.query(fs.ReportQuery)
    today = utcnow().astimezone(handler.hive.settings.policy.zone).date()
    return q.month or today.replace(day=1), q.until


class ReportHandler(HiveLogic):
    auth_resource = "gpuhive:usage"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Accounting per month, user, group and host: GPU-hours reserved, used, used by "
        "queued jobs outside reservations, energy (kWh), with the cross-check that users and "
        "hosts add up to the site (non-admins: their own user and group rows)",
        query=fs.ReportQuery,
        reply=fs.ReportReply,
    )
    async def get(self) -> None:
        first, last = _months(self)
        self.reply(await self.hive.fairshare.report(self.who, first, last))


class ReportCsvHandler(HiveLogic):
    auth_resource = "gpuhive:usage"

    @web.authenticated
    @authorized(READ)
    @operation("The accounting report as CSV", query=fs.ReportQuery, media="text/csv")
    async def get(self) -> None:
        first, last = _months(self)
        data = await self.hive.fairshare.report(self.who, first, last)
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.finish(to_csv(data))
