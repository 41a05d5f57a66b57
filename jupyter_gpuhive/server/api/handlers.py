"""REST handlers: parse the request, call the Hive, serialize the answer."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from tornado import web

from ...model import Reservation, utcnow
from ...model.jobs import RECENT_JOBS, Job
from ...privacy import job_json, reservation_json
from ...protection.marks import mark_violations
from .base import HiveLogic, dumps
from .openapi import generate
from .operations import operation
from .schemas import bodies, queries, replies

# A listing's lending choices (reservation -> lend, reclaim early) and loans (-> jobs).
# as the store reads it (store.preemption.LendingShown): choices, the jobs loans run
Lending = tuple[dict[int, tuple[bool, bool]], dict[int, list[dict[str, Any]]]]


class Shown(HiveLogic):
    """Serializes jobs and reservations as the requester may see them (privacy.py)."""

    def job(self, job: Job) -> dict[str, Any]:
        return job_json(job, self.who, self.hive.settings.privacy)

    def reservation(
        self, res: Reservation, now: datetime | None = None, lending: Lending | None = None
    ) -> dict[str, Any]:
        data = reservation_json(res, self.who, self.hive.settings.privacy, now)
        configured = {host.name for host in self.hive.settings.hosts}
        data["hosts_gone"] = sorted({gpu.host for gpu in res.gpus} - configured)
        if lending is not None:
            choice, lent = lending
            data["lend"], data["reclaim_before_start"] = choice.get(res.id, (True, False))
            data["lent_to"] = lent.get(res.id, [])
        return data

    async def lending(self, found: list[Reservation]) -> Lending:
        """Each reservation's lending choice and the jobs its GPUs run now."""
        shown: Lending = await self.hive.run(
            self.hive.store.preemption.shown, [r.id for r in found]
        )
        return shown

    async def shown(self, res: Reservation, now: datetime | None = None) -> dict[str, Any]:
        return self.reservation(res, now, await self.lending([res]))


class ReclaimHandler(HiveLogic):
    @web.authenticated
    @operation(
        "Take the reservation's lent GPUs back now (holder or admin): every preemptible job on "
        "them gets its signal, then its grace, then is stopped and requeued",
        reply=replies.ReclaimReply,
        errors=(403, 404, 409),
    )
    async def post(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        self.reply(await self.hive.jobs.reclaim(self.who, rid))


class MeHandler(HiveLogic):
    @web.authenticated
    @operation("Who am I: name, groups, admin flag", reply=replies.IdentityReply)
    async def get(self) -> None:
        self.reply(await self.hive.identities.me(self.who))


class HostsHandler(HiveLogic):
    @web.authenticated
    @operation(
        "Live state of every host and GPU: metrics, processes with owners, who holds each GPU "
        "now and next, and its 'state' (down, failed, drained, reserved, busy, unknown or free: "
        "a failed or drained GPU is never free) with its 'health'; on a host that is down, "
        "'advice' (the reason and the fix); with no hosts, 'setup' (the first steps)"
    )
    async def get(self) -> None:
        reply = await self.hive.monitor.report()
        public = self.hive.settings.privacy.public_violations
        ongoing = await self.hive.protection.open_now(self.who, public)  # as on every replica
        shared: HostsBody = self.settings.setdefault(HOSTS_BODY, HostsBody())
        body, self._etag = shared.get(reply, ongoing, self.settings.get("gpuhive_note") or None)
        self.reply_encoded(body)

    _etag: str | None = None

    def compute_etag(self) -> str | None:
        return self._etag  # the shared answer's, computed once with it


HOSTS_BODY = "gpuhive_hosts_body"


class HostsBody:
    """The last `GET hosts` answer, encoded, with its ETag: every poll between two changes of
    the report (a sweep, a holder change) that sees the same violations (most see none)
    shares it. Copying every host and process to mark violations, encoding about 100 KB and
    hashing it for the ETag took each poll ~1 ms of the event loop, and polls are a third
    of a site's requests."""

    def __init__(self) -> None:
        self._last: tuple[Any, ...] = ()  # (report, ongoing, note, body, etag)

    def get(
        self, report: dict[str, Any], ongoing: list[dict[str, Any]], note: str | None
    ) -> tuple[bytes, str]:
        last = self._last
        if last and last[0] is report and last[1] == ongoing and last[2] == note:
            return last[3], last[4]
        hosts = mark_violations(report["hosts"], ongoing)
        body = dumps({**report, "hosts": hosts, "note": note})
        etag = f'"{hashlib.sha1(body, usedforsecurity=False).hexdigest()}"'  # as tornado's
        self._last = (report, ongoing, note, body, etag)
        return body, etag


class MetricsHandler(HiveLogic):
    @web.authenticated
    @operation(
        "Time series per host and GPU (points newer than 'since')", query=queries.MetricsQuery
    )
    async def get(self) -> None:
        q = self.query(queries.MetricsQuery)
        self.reply(self.hive.monitor.metrics(q.host, q.gpu, q.since))


class UsageHandler(HiveLogic):
    @web.authenticated
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


class ReservationUsageHandler(HiveLogic):
    @web.authenticated
    @operation("Usage of one reservation (live while it runs; owner and admins)")
    async def get(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        self.reply(await self.hive.bookings.reservation_usage(self.who, rid))


class ReservationsHandler(Shown):
    confirms_identity_late = True  # a booking changes the database only

    @web.authenticated
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
    @operation(
        "Book GPUs", 201, body=bodies.NewReservation, reply=replies.ReservationReply, errors=(409,)
    )
    async def post(self) -> None:
        booking = self.body(bodies.NewReservation).value()
        created = await self.hive.bookings.create(self.who, booking)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{created.id}")
        # Its lending is what it asked for, and no job can have borrowed a booking that did
        # not exist: nothing to read back.
        lending: Lending = (
            {created.id: (booking.lend, booking.reclaim_before_start)},
            {created.id: []},
        )
        self.reply(self.reservation(created, None, lending), status=201)


class ReservationHandler(Shown):
    confirms_identity_late = True  # an edit or a cancel changes the database only

    @web.authenticated
    @operation("One reservation", reply=replies.ReservationReply)
    async def get(self, reservation_id: str) -> None:
        found = await self.hive.bookings.get(self.id_arg(reservation_id, "reservation"))
        self.reply(await self.shown(found))

    @web.authenticated
    @operation(
        "Edit (owner or admin)",
        body=bodies.ReservationChange,
        reply=replies.ReservationReply,
        errors=(409,),
    )
    async def patch(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        change = self.body(bodies.ReservationChange).value()
        changed = await self.hive.bookings.update(self.who, rid, change)
        self.reply(await self.shown(changed))

    @web.authenticated
    @operation(
        "Cancel an upcoming reservation or end a running one now",
        reply=replies.ReservationReply,
        errors=(409,),
    )
    async def delete(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        done = await self.hive.bookings.cancel(self.who, rid)
        self.reply(await self.shown(done))


class OverviewHandler(HiveLogic):
    @web.authenticated
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
        rule, flags = await self.hive.bookings.add_rule(self.who, new)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{rule.id}")
        self.reply({**rule.to_json(), "flag_changes": flags}, status=201)


class RuleHandler(HiveLogic):
    @web.authenticated
    @operation("One access rule", reply=replies.RuleReply)
    async def get(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        rules = {r.id: r for r in await self.hive.bookings.rules_for(self.who)}
        if rid not in rules:
            from ...errors import NotFound

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


class OpenAPIHandler(HiveLogic):
    @web.authenticated
    @operation("This document (OpenAPI 3.1, generated from the routes and their models)")
    async def get(self) -> None:
        self.reply(generate(self.endpoints, self.settings.get("base_url", "/")))


class TemplatesHandler(HiveLogic):
    @web.authenticated
    @operation("Job templates with their fields, options and an example")
    async def get(self) -> None:
        self.reply({"templates": self.hive.jobs.templates()})


class JobsHandler(Shown):
    runs_to_the_end = True  # a launch or stop on a host must be recorded

    @web.authenticated
    @operation(
        f"Jobs, optionally of one user or in one status: the newest 'limit' (default "
        f"{RECENT_JOBS}; 'more' says older ones exist) and every job running now; others' "
        "jobs as a summary (no command, variables, options or env); env values always masked",
        query=queries.JobsQuery,
        reply=replies.JobList,
    )
    async def get(self) -> None:
        q = self.query(queries.JobsQuery)
        jobs, more = await self.hive.jobs.find(q.user, q.status, q.limit or RECENT_JOBS)
        self.reply({"jobs": [self.job(job) for job in jobs], "more": more})

    @web.authenticated
    @operation(
        "Create a job from a template ('start': true runs it now)",
        201,
        body=bodies.NewJob,
        reply=replies.JobReply,
        errors=(404, 409),
    )
    async def post(self) -> None:
        job = await self.hive.jobs.create(self.who, self.body(bodies.NewJob).value())
        self.set_header("Location", self.request.path.rstrip("/") + f"/{job.id}")
        self.reply(self.job(job), status=201)


class JobPreviewHandler(HiveLogic):
    @web.authenticated
    @operation(
        "The exact per-task commands and environments, without creating anything",
        body=bodies.NewJob,
        reply=replies.Preview,
        errors=(404, 409),
    )
    async def post(self) -> None:
        request = self.body(bodies.NewJob).value()
        self.reply({"tasks": await self.hive.jobs.preview(self.who, request)})


class JobHandler(Shown):
    @web.authenticated
    @operation(
        "One job with its tasks (its definition for the owner and admins)", reply=replies.JobReply
    )
    async def get(self, job_id: str) -> None:
        job = await self.hive.jobs.get(self.id_arg(job_id, "job"))
        self.reply(self.job(job))

    @web.authenticated
    @operation(
        "Delete a job that is not running (owner/admin)", reply=replies.Deleted, errors=(409,)
    )
    async def delete(self, job_id: str) -> None:
        jid = self.id_arg(job_id, "job")
        await self.hive.jobs.delete(self.who, jid)
        self.reply({"deleted": jid})


class JobStartHandler(Shown):
    runs_to_the_end = True  # a launch or stop on a host must be recorded

    @web.authenticated
    @operation("Start (or restart) a job now (owner/admin)", reply=replies.JobReply, errors=(409,))
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.start(self.who, self.id_arg(job_id, "job"))
        self.reply(self.job(job))


class JobStopHandler(Shown):
    runs_to_the_end = True  # a launch or stop on a host must be recorded

    @web.authenticated
    @operation(
        "Stop gracefully: SIGINT, then SIGKILL after a grace", reply=replies.JobReply, errors=(409,)
    )
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.stop(self.who, self.id_arg(job_id, "job"))
        self.reply(self.job(job))


class JobEnqueueHandler(Shown):
    @web.authenticated
    @operation(
        "Put the job in the queue (runs in non-reserved time)",
        reply=replies.JobReply,
        errors=(409,),
    )
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.set_queued(self.who, self.id_arg(job_id, "job"), queued=True)
        self.reply(self.job(job))


class JobDequeueHandler(Shown):
    @web.authenticated
    @operation("Take the job out of the queue", reply=replies.JobReply, errors=(409,))
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.set_queued(self.who, self.id_arg(job_id, "job"), queued=False)
        self.reply(self.job(job))


class JobLogHandler(HiveLogic):
    @web.authenticated
    @operation(
        "A task's log from 'offset' (or its last 'tail' bytes), and how to attach",
        query=queries.LogQuery,
        errors=(503,),
    )
    async def get(self, job_id: str) -> None:
        jid = self.id_arg(job_id, "job")
        q = self.query(queries.LogQuery)  # offset and tail bounded before any shell sees them
        self.reply(await self.hive.jobs.log(self.who, jid, q.task or 0, q.offset or 0, q.tail))


class SshHandler(HiveLogic):
    @web.authenticated
    @operation(
        "The public key to add to ~/.ssh/authorized_keys, and per SSH host whether gpuhive can "
        "already log in as me (needed to run my jobs)"
    )
    async def get(self) -> None:
        self.reply(await self.hive.jobs.ssh_status(self.who))


class ViolationsHandler(HiveLogic):
    @web.authenticated
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


class QueueHandler(HiveLogic):
    @web.authenticated
    @operation(
        "Queued jobs not yet running, with their projected start (from the queue's own plan: "
        "for the first 32 waiting jobs a start they will not miss unless a booking, a foreign "
        "process or a host failure intervenes) and what they wait for"
    )
    async def get(self) -> None:
        self.reply({"jobs": await self.hive.jobs.queue(self.who)})
