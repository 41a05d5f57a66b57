"""REST handlers of access rules, and when the requester may book each GPU."""

from __future__ import annotations

from datetime import timedelta

from tornado import web

from ...errors import NotFound
from ...model import utcnow
from .base import HiveLogic
from .operations import operation
from .schemas import bodies, queries, replies


class RulesHandler(HiveLogic):
    @web.authenticated
    @operation(
        "Access rules (admins: all; others: those that apply to them)", reply=replies.RuleList
    )
    async def get(self) -> None:
        rules = await self.hive.bookings.rules_for(self.who)
        self.reply({"rules": [r.to_json() for r in rules]})

    @web.authenticated
    @operation("Add an access rule (admin)", 201, body=bodies.RuleBody, reply=replies.RuleChanged)
    async def post(self) -> None:
        self.hive.bookings.require_admin(self.who)
        new = self.body(bodies.RuleBody).value()
        rule, flags = await self.hive.bookings.add_rule(self.who, new, self.errand)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{rule.id}")
        self.reply({**rule.to_json(), "flag_changes": flags}, status=201)


class RuleHandler(HiveLogic):
    @web.authenticated
    @operation("One access rule", reply=replies.RuleReply)
    async def get(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        rules = {r.id: r for r in await self.hive.bookings.rules_for(self.who)}
        if rid not in rules:
            raise NotFound(f"There is no access rule {rid} that applies to you.")
        self.reply(rules[rid].to_json())

    @web.authenticated
    @operation("Replace an access rule (admin)", body=bodies.RuleBody, reply=replies.RuleChanged)
    async def put(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        self.hive.bookings.require_admin(self.who)
        new = self.body(bodies.RuleBody).value(rid)
        rule, flags = await self.hive.bookings.replace_rule(self.who, rid, new)
        self.reply({**rule.to_json(), "flag_changes": flags})

    @web.authenticated
    @operation("Delete an access rule (admin)", reply=replies.RuleDeleted)
    async def delete(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        flags = await self.hive.bookings.delete_rule(self.who, rid)
        self.reply({"deleted": rid, "flag_changes": flags})


class CoverageHandler(HiveLogic):
    @web.authenticated
    @operation("When the requester may book each GPU", query=queries.GpuWindow)
    async def get(self) -> None:
        q = self.query(queries.GpuWindow)
        start = q.start or utcnow()
        end = q.end or start + timedelta(days=7)
        self.reply(await self.hive.bookings.coverage(self.who, start, end, q.host, q.gpu))
