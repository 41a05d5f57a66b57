"""REST handlers of jobs: templates, create and preview, start, stop, the queue, logs."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...model import isoformat
from ...model.authority import EXECUTE, READ, WRITE
from ...model.jobs import RECENT_JOBS, TaskState
from .base import HiveLogic
from .operations import operation
from .schemas import bodies, queries, replies
from .shown import Shown


class TemplatesHandler(HiveLogic):
    auth_resource = "gpuhive:jobs"

    @web.authenticated
    @authorized(READ)
    @operation("Job templates with their fields, options and an example")
    async def get(self) -> None:
        self.reply({"templates": self.hive.jobs.templates()})


class JobsHandler(Shown):
    auth_resource = "gpuhive:jobs"
    runs_to_the_end = True  # a launch or stop on a host must be recorded

    @web.authenticated
    @authorized(READ)
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
        standing = self.hive.jobs.standing()
        waiting = {j.id for j in jobs if j.queued and j.status == TaskState.PENDING}
        starts = await self.hive.jobs.starts(waiting) if waiting else {}
        shown = [
            {
                **self.job(job),
                **standing.get(job.id, {}),
                # a job in a batch system's queue (Slurm's): its estimate (squeue --start)
                "estimated_start": isoformat(
                    starts.get(job.id) or self.hive.jobs.engine_start(job)
                ),
            }
            for job in jobs
        ]
        self.reply({"jobs": shown, "more": more})

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Create a job from a template ('start': true runs it now)",
        201,
        body=bodies.NewJob,
        reply=replies.JobReply,
        errors=(404, 409),
    )
    async def post(self) -> None:
        request = self.body(bodies.NewJob).value()
        job = await self.hive.jobs.create(self.who, request, self.errand)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{job.id}")
        self.reply(self.job(job), status=201)


class JobPreviewHandler(HiveLogic):
    auth_resource = "gpuhive:jobs"

    @web.authenticated
    @authorized(READ)
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
    auth_resource = "gpuhive:jobs"

    @web.authenticated
    @authorized(READ)
    @operation(
        "One job with its tasks (its definition for the owner and admins)", reply=replies.JobReply
    )
    async def get(self, job_id: str) -> None:
        job = await self.hive.jobs.get(self.id_arg(job_id, "job"))
        self.reply(self.job(job))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Delete a job that is not running (owner/admin)", reply=replies.Deleted, errors=(409,)
    )
    async def delete(self, job_id: str) -> None:
        jid = self.id_arg(job_id, "job")
        await self.hive.jobs.delete(self.who, jid)
        self.reply({"deleted": jid})


class JobStartHandler(Shown):
    auth_resource = "gpuhive:jobs"
    runs_to_the_end = True  # a launch or stop on a host must be recorded

    @web.authenticated
    @authorized(EXECUTE)
    @operation("Start (or restart) a job now (owner/admin)", reply=replies.JobReply, errors=(409,))
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.start(self.who, self.id_arg(job_id, "job"))
        self.reply(self.job(job))


class JobStopHandler(Shown):
    auth_resource = "gpuhive:jobs"
    runs_to_the_end = True  # a launch or stop on a host must be recorded

    @web.authenticated
    @authorized(EXECUTE)
    @operation(
        "Stop gracefully: SIGINT, then SIGKILL after a grace", reply=replies.JobReply, errors=(409,)
    )
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.stop(self.who, self.id_arg(job_id, "job"))
        self.reply(self.job(job))


class JobEnqueueHandler(Shown):
    auth_resource = "gpuhive:jobs"

    @web.authenticated
    @authorized(EXECUTE)
    @operation(
        "Put the job in the queue (runs in non-reserved time)",
        reply=replies.JobReply,
        errors=(409,),
    )
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.set_queued(self.who, self.id_arg(job_id, "job"), queued=True)
        self.reply(self.job(job))


class JobDequeueHandler(Shown):
    auth_resource = "gpuhive:jobs"

    @web.authenticated
    @authorized(EXECUTE)
    @operation("Take the job out of the queue", reply=replies.JobReply, errors=(409,))
    async def post(self, job_id: str) -> None:
        job = await self.hive.jobs.set_queued(self.who, self.id_arg(job_id, "job"), queued=False)
        self.reply(self.job(job))


class JobLogHandler(HiveLogic):
    auth_resource = "gpuhive:jobs"

    @web.authenticated
    @authorized(READ)
    @operation(
        "A task's log from 'offset' (or its last 'tail' bytes), and how to attach",
        query=queries.LogQuery,
        errors=(503,),
    )
    async def get(self, job_id: str) -> None:
        jid = self.id_arg(job_id, "job")
        q = self.query(queries.LogQuery)  # offset and tail bounded before any shell sees them
        self.reply(await self.hive.jobs.log(self.who, jid, q.task or 0, q.offset or 0, q.tail))


class QueueHandler(HiveLogic):
    auth_resource = "gpuhive:jobs"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Queued jobs not yet running, with their projected start (from the queue's own plan: "
        "for the first 32 waiting jobs a start they will not miss unless a booking, a foreign "
        "process or a host failure intervenes), their place in the queue's order and what "
        "they wait for",
        reply=replies.QueueList,
    )
    async def get(self) -> None:
        self.reply({"jobs": await self.hive.jobs.queue(self.who)})
