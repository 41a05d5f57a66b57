"""REST handlers of reservations: book, list, edit, cancel, their usage, reclaiming lent GPUs,
and the occupancy overview."""

from __future__ import annotations

from datetime import timedelta

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...model import utcnow
from ...model.authority import READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas import bodies, queries, replies
from .shown import Lending, Shown


class ReservationsHandler(Shown):
    auth_resource = "gpuhive:reservations"
    confirms_identity_late = True  # a booking changes the database only

    @web.authenticated
    @authorized(READ)
    @operation(
        "Reservations overlapping a window",
        query=queries.ReservationsQuery,
        reply=replies.ReservationList,
    )
    async def get(self) -> None:
        q = self.query(queries.ReservationsQuery)
        now = utcnow()
        policy = self.hive.settings.policy
        start = q.start or now
        end = q.end or start + policy.horizon + policy.max_length
        found, lending = await self.hive.bookings.find_shown(
            start,
            end,
            host=q.host,
            gpu=q.gpu,
            user=q.user,
            include_cancelled=q.include_cancelled,
            limit=1000 if q.limit is None else q.limit,
        )
        self.reply({"reservations": [self.reservation(r, now, lending) for r in found]})

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Book GPUs", 201, body=bodies.NewReservation, reply=replies.ReservationReply, errors=(409,)
    )
    async def post(self) -> None:
        booking = self.body(bodies.NewReservation).value()
        created = await self.hive.bookings.create(self.who, booking, self.errand)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{created.id}")
        # Its lending is what it asked for, and no job can have borrowed a booking that did
        # not exist: nothing to read back.
        lending: Lending = (
            {created.id: (booking.lend, booking.reclaim_before_start)},
            {created.id: []},
        )
        self.reply(self.reservation(created, None, lending), status=201)


class ReservationHandler(Shown):
    auth_resource = "gpuhive:reservations"
    confirms_identity_late = True  # an edit or a cancel changes the database only

    @web.authenticated
    @authorized(READ)
    @operation("One reservation", reply=replies.ReservationReply)
    async def get(self, reservation_id: str) -> None:
        found = await self.hive.bookings.get(self.id_arg(reservation_id, "reservation"))
        self.reply(await self.shown(found))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Edit (owner or admin)",
        body=bodies.ReservationChange,
        reply=replies.ReservationReply,
        errors=(409,),
    )
    async def patch(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        change = self.body(bodies.ReservationChange).value()
        changed = await self.hive.bookings.update(self.who, rid, change, errand=self.errand)
        self.reply(await self.shown(changed))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Cancel an upcoming reservation or end a running one now",
        reply=replies.ReservationReply,
        errors=(409,),
    )
    async def delete(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        done = await self.hive.bookings.cancel(self.who, rid, self.errand)
        self.reply(await self.shown(done))


class ReservationUsageHandler(HiveLogic):
    auth_resource = "gpuhive:reservations"

    @web.authenticated
    @authorized(READ)
    @operation("Usage of one reservation (live while it runs; owner and admins)")
    async def get(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        self.reply(await self.hive.bookings.reservation_usage(self.who, rid))


class ReclaimHandler(HiveLogic):
    auth_resource = "gpuhive:reservations"

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Take the reservation's lent GPUs back now (holder or admin): every preemptible job on "
        "them gets its signal, then its grace, then is stopped and requeued",
        reply=replies.ReclaimReply,
        errors=(403, 404, 409),
    )
    async def post(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        self.reply(await self.hive.jobs.reclaim(self.who, rid))


class OverviewHandler(HiveLogic):
    auth_resource = "gpuhive:reservations"

    @web.authenticated
    @authorized(READ)
    @operation(
        "GPU × time-slot occupancy: 'f' free, 'm' mine, 'o' others", query=queries.OverviewQuery
    )
    async def get(self) -> None:
        q = self.query(queries.OverviewQuery)
        now = utcnow().replace(minute=0, second=0, microsecond=0)
        start = q.start or now
        end = q.end or start + timedelta(days=7)
        slot = q.slot or timedelta(hours=1)
        self.reply(
            await self.hive.bookings.overview(self.who, start, end, slot, host=q.host, gpu=q.gpu)
        )
