"""REST handler of the earliest-slot search (bookings.finder)."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...bookings.finder import instant, slot_json
from ...model.authority import READ
from .base import HiveLogic
from .operations import operation
from .schemas import finder as fs


class SlotSearchHandler(HiveLogic):
    auth_resource = "gpuhive:reservations"

    @web.authenticated
    @authorized(READ)
    @operation(
        "The earliest slots that fit a request (a count of GPUs or MIG slices, a duration, "
        "same host / NVLink / NUMA node / model / memory / indices), between not_before and "
        "deadline: earliest first, then least fragmentation. They respect reservations, the "
        "requester's access rules and fair-share limits, and running queued jobs; book one "
        "with POST reservations. With no GPU hosts at all it is a 409 that says how to add one",
        body=fs.SlotSearchBody,
        reply=fs.SlotSearchReply,
        errors=(409,),
    )
    async def post(self) -> None:
        want = self.body(fs.SlotSearchBody).value()
        checked, slots = await self.hive.bookings.search(self.who, want, self.hive.jobs.vendors)
        self.reply(
            {
                "slots": [slot_json(s) for s in slots],
                "not_before": instant(checked.not_before).isoformat(),
                "deadline": instant(checked.deadline).isoformat(),
            }
        )
