"""REST handlers of access rules, and when the requester may book each GPU."""

from __future__ import annotations

from datetime import timedelta

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...errors import NotFound
from ...model import utcnow
from ...model.authority import READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas import bodies, queries, replies


class RulesHandler(HiveLogic):
    auth_resource = "gpuhive:rules"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Access rules (admins: all; others: those that apply to them)", reply=replies.RuleList
    )
    async def get(self) -> None:
        rules = await self.hive.bookings.rules_for(self.who)
        self.reply({"rules": [r.to_json() for r in rules]})

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Add an access rule (admins; a host group's administrators, on its hosts)",
        201,
        body=bodies.RuleBody,
        reply=replies.RuleChanged,
    )
    async def post(self) -> None:
        new = self.body(bodies.RuleBody).value()
        rule, flags = await self.hive.bookings.add_rule(self.who, new, self.errand)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{rule.id}")
        self.reply({**rule.to_json(), "flag_changes": flags}, status=201)


class RuleHandler(HiveLogic):
    auth_resource = "gpuhive:rules"

    @web.authenticated
    @authorized(READ)
    @operation("One access rule", reply=replies.RuleReply)
    async def get(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        rules = {r.id: r for r in await self.hive.bookings.rules_for(self.who)}
        if rid not in rules:
            raise NotFound(f"There is no access rule {rid} that applies to you.")
        self.reply(rules[rid].to_json())

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Replace an access rule (admins; a host group's administrators, on its hosts)",
        body=bodies.RuleBody,
        reply=replies.RuleChanged,
    )
    async def put(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        new = self.body(bodies.RuleBody).value(rid)
        rule, flags = await self.hive.bookings.replace_rule(self.who, rid, new)
        self.reply({**rule.to_json(), "flag_changes": flags})

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Delete an access rule (admins; a host group's administrators, on its hosts)",
        reply=replies.RuleDeleted,
    )
    async def delete(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        flags = await self.hive.bookings.delete_rule(self.who, rid)
        self.reply({"deleted": rid, "flag_changes": flags})


class CoverageHandler(HiveLogic):
    auth_resource = "gpuhive:rules"

    @web.authenticated
    @authorized(READ)
    @operation("When the requester may book each GPU", query=queries.GpuWindow)
    async def get(self) -> None:
        q = self.query(queries.GpuWindow)
        start = q.start or utcnow()
        end = q.end or start + timedelta(days=7)
        self.reply(await self.hive.bookings.coverage(self.who, start, end, q.host, q.gpu))
