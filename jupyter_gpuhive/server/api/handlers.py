"""REST handlers: parse the request, call the Hive, serialize the answer."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tornado import web

from ...hosts.guidance import advise
from ...jobs.model import Job
from ...model import Reservation, utcnow
from ...privacy import job_json, reservation_json
from .base import HiveLogic
from .openapi import openapi_document


class Shown(HiveLogic):
    """Serializes jobs and reservations as the requester may see them (privacy.py)."""

    def job(self, job: Job) -> dict[str, Any]:
        return job_json(job, self.who, self.hive.settings.privacy)

    def reservation(self, res: Reservation, now: datetime | None = None) -> dict[str, Any]:
        return reservation_json(res, self.who, self.hive.settings.privacy, now)


class MeHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        self.reply(await self.hive.me(self.who))


class HostsHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        reply = advise(await self.hive.monitor.hosts(), self.hive.public_key)
        self.reply({**reply, "note": self.settings.get("gpuhive_note") or None})


class MetricsHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        since = self.get_query_argument("since", None)
        self.reply(
            self.hive.monitor.metrics(
                self.get_query_argument("host", None),
                self.get_query_argument("gpu", None),
                self.instant_arg("since", utcnow()) if since else None,
            )
        )


class UsageHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        end = self.instant_arg("end", utcnow())
        start = self.instant_arg("start", end - timedelta(days=7))
        self.reply(await self.hive.usage(self.who, start, end))


class ReservationUsageHandler(HiveLogic):
    @web.authenticated
    async def get(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        self.reply(await self.hive.reservation_usage(self.who, rid))


class ReservationsHandler(Shown):
    @web.authenticated
    async def get(self) -> None:
        now = utcnow()
        policy = self.hive.settings.policy
        start = self.instant_arg("start", now)
        end = self.instant_arg("end", start + policy.horizon + policy.max_length)
        found = await self.hive.list_reservations(
            start,
            end,
            host=self.get_query_argument("host", None),
            gpu=self.get_query_argument("gpu", None),
            user=self.get_query_argument("user", None),
            include_cancelled=self.bool_arg("include_cancelled"),
            limit=self.int_arg("limit", 1000),
        )
        self.reply({"reservations": [self.reservation(r, now) for r in found]})

    @web.authenticated
    async def post(self) -> None:
        created = await self.hive.create_reservation(self.who, self.json_body())
        self.set_header("Location", self.request.path.rstrip("/") + f"/{created.id}")
        self.reply(self.reservation(created), status=201)


class ReservationHandler(Shown):
    @web.authenticated
    async def get(self, reservation_id: str) -> None:
        found = await self.hive.get_reservation(self.id_arg(reservation_id, "reservation"))
        self.reply(self.reservation(found))

    @web.authenticated
    async def patch(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        changed = await self.hive.update_reservation(self.who, rid, self.json_body())
        self.reply(self.reservation(changed))

    @web.authenticated
    async def delete(self, reservation_id: str) -> None:
        rid = self.id_arg(reservation_id, "reservation")
        done = await self.hive.cancel_reservation(self.who, rid)
        self.reply(self.reservation(done))


class OverviewHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        now = utcnow().replace(minute=0, second=0, microsecond=0)
        start = self.instant_arg("start", now)
        end = self.instant_arg("end", start + timedelta(days=7))
        self.reply(
            await self.hive.overview(
                self.who,
                start,
                end,
                self.duration_arg("slot", "1h"),
                host=self.get_query_argument("host", None),
                gpu=self.get_query_argument("gpu", None),
            )
        )


class RulesHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        rules = await self.hive.rules_for(self.who)
        self.reply({"rules": [r.to_json() for r in rules]})

    @web.authenticated
    async def post(self) -> None:
        self.hive.require_admin(self.who)
        rule, flags = await self.hive.add_rule(self.who, self.json_body())
        self.set_header("Location", self.request.path.rstrip("/") + f"/{rule.id}")
        self.reply({**rule.to_json(), "flag_changes": flags}, status=201)


class RuleHandler(HiveLogic):
    @web.authenticated
    async def get(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        rules = {r.id: r for r in await self.hive.rules_for(self.who)}
        if rid not in rules:
            from ...errors import NotFound

            raise NotFound(f"There is no access rule {rid} that applies to you.")
        self.reply(rules[rid].to_json())

    @web.authenticated
    async def put(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        self.hive.require_admin(self.who)
        rule, flags = await self.hive.replace_rule(self.who, rid, self.json_body())
        self.reply({**rule.to_json(), "flag_changes": flags})

    @web.authenticated
    async def delete(self, rule_id: str) -> None:
        rid = self.id_arg(rule_id, "access rule")
        flags = await self.hive.delete_rule(self.who, rid)
        self.reply({"deleted": rid, "flag_changes": flags})


class CoverageHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        start = self.instant_arg("start", utcnow())
        end = self.instant_arg("end", start + timedelta(days=7))
        self.reply(
            await self.hive.coverage(
                self.who,
                start,
                end,
                self.get_query_argument("host", None),
                self.get_query_argument("gpu", None),
            )
        )


class OpenAPIHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        self.reply(openapi_document(self.settings.get("base_url", "/")))


class TemplatesHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        self.reply({"templates": self.hive.templates()})


class JobsHandler(Shown):
    @web.authenticated
    async def get(self) -> None:
        jobs = await self.hive.list_jobs(
            self.get_query_argument("user", None), self.get_query_argument("status", None)
        )
        self.reply({"jobs": [self.job(job) for job in jobs]})

    @web.authenticated
    async def post(self) -> None:
        job = await self.hive.create_job(self.who, self.json_body())
        self.set_header("Location", self.request.path.rstrip("/") + f"/{job.id}")
        self.reply(self.job(job), status=201)


class JobPreviewHandler(HiveLogic):
    @web.authenticated
    async def post(self) -> None:
        self.reply({"tasks": await self.hive.preview_job(self.who, self.json_body())})


class JobHandler(Shown):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        job = await self.hive.get_job(self.id_arg(job_id, "job"))
        self.reply(self.job(job))

    @web.authenticated
    async def delete(self, job_id: str) -> None:
        jid = self.id_arg(job_id, "job")
        await self.hive.delete_job(self.who, jid)
        self.reply({"deleted": jid})


class JobStartHandler(Shown):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        job = await self.hive.start_job(self.who, self.id_arg(job_id, "job"))
        self.reply(self.job(job))


class JobStopHandler(Shown):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        job = await self.hive.stop_job(self.who, self.id_arg(job_id, "job"))
        self.reply(self.job(job))


class JobEnqueueHandler(Shown):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        job = await self.hive.queue_job(self.who, self.id_arg(job_id, "job"), queued=True)
        self.reply(self.job(job))


class JobDequeueHandler(Shown):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        job = await self.hive.queue_job(self.who, self.id_arg(job_id, "job"), queued=False)
        self.reply(self.job(job))


class JobLogHandler(HiveLogic):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        tail = self.get_query_argument("tail", None)
        self.reply(
            await self.hive.job_log(
                self.who,
                self.id_arg(job_id, "job"),
                self.int_arg("task", 0, 0),
                self.int_arg("offset", 0, 0),  # bounded before any shell sees it
                self.int_arg("tail", 0, 0) if tail else None,
            )
        )


class SshHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        self.reply(await self.hive.ssh_status(self.who))


class ViolationsHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        end = self.instant_arg("end", utcnow() + timedelta(seconds=1))
        start = self.instant_arg("start", end - timedelta(days=7))
        protection = self.hive.protection
        public = self.hive.settings.privacy.public_violations
        found = await protection.history(
            start,
            end,
            user=self.get_query_argument("user", None),
            host=self.get_query_argument("host", None),
            reservation_id=self.id_query_arg("reservation"),
            kinds=self.get_query_arguments("kind") or None,
            limit=self.int_arg("limit", 1000),
            viewer=self.who,
            public=public,
        )
        self.reply(
            {
                "start": start.isoformat(),
                "end": end.isoformat(),
                "ongoing": protection.ongoing(self.who, public),
                "violations": found,
            }
        )


class QueueHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        self.reply({"jobs": await self.hive.queue(self.who)})
