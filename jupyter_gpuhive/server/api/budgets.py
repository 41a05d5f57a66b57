"""REST handlers of budgets: site admins set them; everyone sees their own and their groups'
standing; a group's statement for its host group's administrators (bookings/budgets.py)."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...bookings.budgets import statement_csv
from ...model.authority import READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas import budgets as bs


class BudgetsHandler(HiveLogic):
    auth_resource = "gpuhive:budgets"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Budgets with their standing now (site admins: all; others: their own and their "
        "groups', and those of the host groups they administer)",
        reply=bs.BudgetList,
    )
    async def get(self) -> None:
        found = await self.hive.run(self.hive.fairshare.budgets.listed, self.who)
        self.reply({"budgets": found})

    @web.authenticated
    @authorized(WRITE)
    @operation("Add a budget (site admins)", 201, body=bs.BudgetBody, reply=bs.BudgetReply)
    async def post(self) -> None:
        budget = self.body(bs.BudgetBody).value()
        budgets = self.hive.fairshare.budgets
        made = await self.hive.run(budgets.add, self.who, budget, self.errand)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{made['id']}")
        self.reply(made, status=201)


class BudgetHandler(HiveLogic):
    auth_resource = "gpuhive:budgets"

    @web.authenticated
    @authorized(READ)
    @operation(
        "One budget and its standing: used, committed ahead, carried, left, renews_at",
        query=bs.BudgetQuery,
        reply=bs.BudgetReply,
        errors=(404,),
    )
    async def get(self, budget_id: str) -> None:
        bid = self.id_arg(budget_id, "budget")
        at = self.query(bs.BudgetQuery).at
        self.reply(await self.hive.run(self.hive.fairshare.budgets.one, self.who, bid, at))

    @web.authenticated
    @authorized(WRITE)
    @operation("Replace a budget (site admins)", body=bs.BudgetBody, reply=bs.BudgetReply)
    async def put(self, budget_id: str) -> None:
        bid = self.id_arg(budget_id, "budget")
        budget = self.body(bs.BudgetBody).value()
        self.reply(await self.hive.run(self.hive.fairshare.budgets.replace, self.who, bid, budget))

    @web.authenticated
    @authorized(WRITE)
    @operation("Remove a budget (site admins)", reply=bs.BudgetDeleted)
    async def delete(self, budget_id: str) -> None:
        bid = self.id_arg(budget_id, "budget")
        await self.hive.run(self.hive.fairshare.budgets.remove, self.who, bid)
        self.reply({"deleted": bid})


class StatementHandler(HiveLogic):
    auth_resource = "gpuhive:budgets"

    @web.authenticated
    @authorized(READ)
    @operation(
        "A budget's statement for a period: who used what on which hosts, GPU-hours and kWh "
        "(the host group's administrators, site admins; a user their own)",
        query=bs.BudgetQuery,
        reply=bs.StatementReply,
        errors=(404,),
    )
    async def get(self, budget_id: str) -> None:
        bid = self.id_arg(budget_id, "budget")
        at = self.query(bs.BudgetQuery).at
        self.reply(await self.hive.run(self.hive.fairshare.budgets.statement, self.who, bid, at))


class StatementCsvHandler(HiveLogic):
    auth_resource = "gpuhive:budgets"

    @web.authenticated
    @authorized(READ)
    @operation("A budget's statement as CSV", query=bs.BudgetQuery, media="text/csv", errors=(404,))
    async def get(self, budget_id: str) -> None:
        bid = self.id_arg(budget_id, "budget")
        at = self.query(bs.BudgetQuery).at
        data = await self.hive.run(self.hive.fairshare.budgets.statement, self.who, bid, at)
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.finish(statement_csv(data))
