"""The Hive: composes the store and the services, and runs blocking work off the event loop."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from .bookings import access
from .bookings.overview import occupancy
from .bookings.reservations import Policy, ReservationService
from .errors import Conflict, Forbidden, Invalid, Unavailable
from .hosts.pool import HostPool, HostUnavailable, SshSettings
from .integrations import Integrations, IntegrationSettings
from .jobs.catalog import TEMPLATES
from .jobs.launcher import Launcher
from .jobs.model import ACTIVE, Job
from .jobs.queue import Scheduler
from .jobs.service import JobService
from .model import Gpu, HostDecl, Identity, Reservation, isoformat, utcnow
from .monitor.sampler import Sweep
from .monitor.service import Monitor
from .privacy import Privacy, job_json, sees_all_of
from .protection.service import Protection, ProtectionSettings
from .store import Store
from .store.leader import Leadership

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LIST = 10_000


@dataclass
class HiveSettings:
    """Everything the core needs from configuration."""

    db_url: str
    policy: Policy
    hosts: list[HostDecl] = field(default_factory=list)
    admin_users: frozenset[str] = frozenset()
    admin_groups: frozenset[str] = frozenset()
    groups: Mapping[str, Iterable[str]] = field(default_factory=dict)
    workers: int = 8
    ssh: SshSettings = field(default_factory=SshSettings)
    poll_interval: float = 5.0
    history: int = 720
    monitor: bool = True
    protection: ProtectionSettings = field(default_factory=ProtectionSettings)
    privacy: Privacy = field(default_factory=Privacy)
    integrations: IntegrationSettings = field(default_factory=IntegrationSettings)


class Hive:
    """The running gpuhive: store, services and their lifecycles."""

    def __init__(
        self, settings: HiveSettings, publish: Callable[[dict[str, Any]], Any] | None = None
    ) -> None:
        self.settings = settings
        self.store = Store(settings.db_url)
        self.executor = ThreadPoolExecutor(settings.workers, thread_name_prefix="gpuhive-db")
        self.reservations = ReservationService(self.store, settings.policy, self.identity_of)
        self.pool = HostPool(settings.hosts, settings.ssh)
        self.integrations = Integrations(self.store, settings.integrations, self.run, utcnow)
        self.monitor = Monitor(
            self.store, self.pool, self.run, settings.poll_interval, settings.history
        )
        self.launcher = Launcher(self.pool, self.store.jobs)
        self._logins: dict[tuple[str, str], float] = {}  # (host, user) → confirmed until
        self.jobs = JobService(self.store, settings.policy.zone, self.identity_of)
        self.scheduler = Scheduler(
            self.store,
            self.launcher,
            identity_of=self.identity_of,
            zone=settings.policy.zone,
            interval=settings.poll_interval,
        )
        self.monitor.sampler.listeners.append(self._sync_jobs)
        self.protection = Protection(
            settings.protection, self.store, self.pool, self.run,
            publish=publish, job_owners=self._job_owners,
        )  # fmt: skip
        self.monitor.sampler.listeners.append(self.protection.on_sweep)
        self.integrations.ongoing = self.protection.ongoing
        self.monitor.sampler.listeners.append(self.integrations.on_sweep)  # webhook events
        self.leadership = Leadership(
            settings.db_url, self._lead, self._follow, interval=max(0.2, settings.poll_interval / 2)
        )
        self._member_of: dict[str, set[str]] = {}
        for group, members in settings.groups.items():
            for member in members:
                self._member_of.setdefault(member, set()).add(group)

    def open(self) -> Hive:
        """Migrate the store and record the configured inventory (blocking)."""
        self.store.open()
        self.store.inventory.sync(self.settings.hosts)
        return self

    async def start(self) -> None:
        """Start leader election; the leader runs the background loops (monitoring)."""
        self.leadership.start()

    async def _lead(self) -> None:
        self.integrations.start()  # reminders: one server sends them
        if self.settings.monitor and self.settings.hosts:
            self.monitor.start()

    async def _follow(self) -> None:
        await self.monitor.halt()
        await self.scheduler.settle()

    async def use_hosts(self, hosts: list[HostDecl], ssh: SshSettings) -> None:
        """Use a new host list (the hosts file changed): record it, then sweep the new set."""
        await self.run(self.store.inventory.sync, hosts)
        self.settings.hosts = hosts
        self.pool.settings = ssh
        await self.pool.use_hosts(hosts)
        if self.leadership.leader:
            await self.monitor.halt()
            await self._lead()

    async def stop(self) -> None:
        """Stop the background loops and close host connections."""
        await self.leadership.stop()
        await self.integrations.stop()
        await self.protection.stop()
        await self.monitor.stop()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.store.close()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking (database) work in the hive's thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    # --- identity ------------------------------------------------------------------

    def identify(self, name: str, groups: Iterable[str] | None) -> Identity:
        """The Identity of a requester: provider groups plus configured ones, admin flag.

        `groups=None` means the source does not know the user's groups ("unknown" is not
        "none"): the groups last seen count, so such a request never erases them.
        """
        known = self.store.users.groups_of(name) if groups is None else frozenset(groups)
        all_groups = known | frozenset(self._member_of.get(name, ()))
        admin = name in self.settings.admin_users or bool(all_groups & self.settings.admin_groups)
        return Identity(name, all_groups, admin)

    def identity_of(self, name: str) -> Identity:
        """The Identity of a stored user name (groups as last seen)."""
        return self.identify(name, self.store.users.groups_of(name))

    # --- queries -------------------------------------------------------------------

    async def me(self, who: Identity) -> dict[str, Any]:
        if not self.store.users.known(who):
            await self.run(self.store.users.touch, who)
        return who.to_json()

    def gpus_matching(self, host: str | None, gpu: str | None) -> list[Gpu]:
        """GPUs filtered by host name and/or GPU name; unknown names are refused."""
        inventory = self.store.inventory
        if gpu:
            found = inventory.gpu(gpu)
            if found is None:
                raise Invalid(f"Unknown GPU '{gpu}'.")
            return [found]
        if host:
            found_host = inventory.host(host)
            if found_host is None:
                raise Invalid(f"Unknown host '{host}'.")
            return list(found_host.gpus)
        return inventory.gpus()

    async def list_reservations(
        self,
        start: datetime,
        end: datetime,
        *,
        host: str | None = None,
        gpu: str | None = None,
        user: str | None = None,
        include_cancelled: bool = False,
        limit: int = 1000,
    ) -> list[Reservation]:
        if end <= start:
            raise Invalid("The end of the window must be after its start.")
        if not 0 < limit <= MAX_LIST:
            raise Invalid(f"'limit' must be between 1 and {MAX_LIST}.")
        gpu_ids = [g.id for g in self.gpus_matching(host, gpu)] if (host or gpu) else None
        return await self.run(
            self.store.reservations.window,
            start,
            end,
            gpu_ids=gpu_ids,
            owner=user,
            include_cancelled=include_cancelled,
            limit=limit,
        )

    async def overview(
        self,
        who: Identity,
        start: datetime,
        end: datetime,
        slot: timedelta,
        host: str | None = None,
        gpu: str | None = None,
    ) -> dict[str, Any]:
        gpus = self.gpus_matching(host, gpu)
        if end <= start:
            raise Invalid("The end of the window must be after its start.")
        found = await self.run(
            self.store.reservations.window, start, end, gpu_ids=[g.id for g in gpus]
        )
        return occupancy(found, gpus, start, end, slot, who)

    # --- reservations ---------------------------------------------------------------

    async def get_reservation(self, reservation_id: int) -> Reservation:
        return await self.run(self.store.reservations.get, reservation_id)

    async def create_reservation(self, who: Identity, body: dict[str, Any]) -> Reservation:
        if not self.store.users.known(who):
            await self.run(self.store.users.touch, who)
        made = await self.run(self.reservations.create, who, body)
        self.integrations.reservation_event("created", made)
        return made

    async def update_reservation(
        self, who: Identity, reservation_id: int, body: dict[str, Any]
    ) -> Reservation:
        changed = await self.run(self.reservations.update, who, reservation_id, body)
        self.integrations.reservation_event("changed", changed)
        return changed

    async def cancel_reservation(self, who: Identity, reservation_id: int) -> Reservation:
        done = await self.run(self.reservations.cancel, who, reservation_id)
        self.integrations.reservation_event("cancelled", done)
        return done

    # --- access rules ---------------------------------------------------------------

    async def rules_for(self, who: Identity) -> list[access.Rule]:
        """All rules for admins; the rules that apply to `who` for everyone else."""
        rules = await self.run(self.store.rules.all)
        return rules if who.is_admin else [r for r in rules if r.applies_to(who)]

    @staticmethod
    def require_admin(who: Identity) -> None:
        if not who.is_admin:
            raise Forbidden(f"Only gpuhive admins may change access rules; {who.name} is not one.")

    def _known_resources(self, rule: access.Rule) -> None:
        for host in rule.hosts:
            if self.store.inventory.host(host) is None:
                raise Invalid(f"The rule names an unknown host '{host}'.")
        for gpu in rule.gpus:
            if self.store.inventory.gpu(gpu) is None:
                raise Invalid(f"The rule names an unknown GPU '{gpu}'.")

    async def add_rule(self, who: Identity, body: Any) -> tuple[access.Rule, dict[int, Any]]:
        self.require_admin(who)
        rule = access.parse_rule(body)
        self._known_resources(rule)
        saved = await self.run(self.store.rules.add, rule, who.name)
        return saved, await self.run(self.reservations.reflag)

    async def replace_rule(
        self, who: Identity, rule_id: int, body: Any
    ) -> tuple[access.Rule, dict[int, Any]]:
        self.require_admin(who)
        rule = access.parse_rule(body, rule_id)
        self._known_resources(rule)
        saved = await self.run(self.store.rules.replace, rule_id, rule)
        return saved, await self.run(self.reservations.reflag)

    async def delete_rule(self, who: Identity, rule_id: int) -> dict[int, Any]:
        self.require_admin(who)
        await self.run(self.store.rules.remove, rule_id)
        return await self.run(self.reservations.reflag)

    async def coverage(
        self, who: Identity, start: datetime, end: datetime, host: str | None, gpu: str | None
    ) -> dict[str, Any]:
        """Per GPU, the spans of [start, end) in which `who` may book (for the calendar)."""
        if end <= start or end - start > timedelta(days=62):
            raise Invalid("The window must end after it starts and span at most 62 days.")
        gpus = self.gpus_matching(host, gpu)
        rules = await self.run(self.store.rules.all)
        unrestricted = not rules or who.is_admin
        zone = self.settings.policy.zone
        spans = {
            g.ref: [
                [a.isoformat(), b.isoformat()]
                for a, b in (
                    [(start, end)]
                    if unrestricted
                    else access.allowed_spans(rules, who, g, start, end, zone)
                )
            ]
            for g in gpus
        }
        return {"unrestricted": unrestricted, "timezone": str(zone), "gpus": spans}

    # --- usage ----------------------------------------------------------------------

    async def reservation_usage(self, who: Identity, reservation_id: int) -> dict[str, Any]:
        """A reservation's usage and violations; for its owner and admins (or all, if public)."""
        res = await self.get_reservation(reservation_id)
        if not (self.settings.privacy.public_usage or sees_all_of(who, res.owner)):
            raise Forbidden(
                f"The usage of reservation {reservation_id} is shown to its owner "
                f"({res.owner}) and to admins only."
            )
        usage = await self.run(self.store.usage.for_reservation, res)
        usage["violations"] = await self.protection.for_reservation(
            reservation_id, who, self.settings.privacy.public_violations
        )
        return usage

    async def usage(self, who: Identity, start: datetime, end: datetime) -> dict[str, Any]:
        """Reserved and used GPU-hours per user, per GPU and per reservation in a window.

        Per GPU and in total for everyone; per user and per reservation only one's own rows,
        unless `who` is an admin or usage is public.
        """
        if end <= start or end - start > timedelta(days=400):
            raise Invalid("The window must end after it starts and span at most 400 days.")
        measured = await self.run(self.store.usage.window, start, end)
        found = await self.run(self.store.reservations.window, start, end, limit=MAX_LIST)
        per_res = await self.run(self.store.usage.by_reservation, [r.id for r in found])
        reserved_by_user: dict[str, float] = {}
        reserved_by_gpu: dict[int, float] = {}
        for res in found:
            hours = (min(res.end, end) - max(res.start, start)).total_seconds() / 3600
            reserved_by_user[res.owner] = reserved_by_user.get(res.owner, 0) + hours * len(res.gpus)
            for gpu in res.gpus:
                reserved_by_gpu[gpu.id] = reserved_by_gpu.get(gpu.id, 0) + hours
        used_by_user = dict(measured["users"])
        used_by_gpu = dict(measured["gpus"])
        inventory = self.store.inventory
        users = sorted(set(reserved_by_user) | set(used_by_user))
        gpu_ids = sorted(set(reserved_by_gpu) | set(used_by_gpu))
        total = {  # the whole site's GPU-hours in the window, for everyone
            "reserved_gpu_hours": round(sum(reserved_by_gpu.values()), 4),
            "used_gpu_hours": round(sum(g["used_gpu_hours"] for g in used_by_gpu.values()), 4),
        }
        if not (who.is_admin or self.settings.privacy.public_usage):
            mine = {who.name, self.protection.unix_user(who.name)}  # booked as, ran as
            users = [u for u in users if u in mine]
            found = [r for r in found if r.owner == who.name]
        return {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "total": total,
            "by_user": [
                {"user": u, "reserved_gpu_hours": round(reserved_by_user.get(u, 0.0), 4),
                 **used_by_user.get(u, {"used_gpu_hours": 0.0})}
                for u in users
            ],
            "by_gpu": [
                {"gpu": inventory.gpu_by_id(g).ref,
                 "reserved_hours": round(reserved_by_gpu.get(g, 0.0), 4),
                 **used_by_gpu.get(g, {"used_gpu_hours": 0.0})}
                for g in gpu_ids
            ],
            "reservations": [
                {"id": r.id, "owner": r.owner, "title": r.title,
                 "gpus": [g.ref for g in r.gpus],
                 "reserved_gpu_hours": round(
                     (r.end - r.start).total_seconds() / 3600 * len(r.gpus), 4),
                 **per_res.get(r.id, {"used_gpu_hours": 0.0})}
                for r in found
            ],
        }  # fmt: skip

    # --- jobs -----------------------------------------------------------------------

    async def _sync_jobs(self, sweep: Sweep) -> None:
        """After each sweep (leader only): follow running tasks, then run the queue."""
        await self.launcher.sync()
        await self.scheduler.tick(sweep)

    async def queue(self, who: Identity) -> list[dict[str, Any]]:
        """Queued jobs not yet running, with when they could start and what they wait for."""
        jobs = await self.run(self.store.jobs.all, queued=True)
        pending = [j for j in jobs if j.status == "pending"]
        estimates = await self.scheduler.estimates()
        report = self.scheduler.last_report
        waiting = report.waiting if report is not None else {}
        return [
            {
                **job_json(job, who, self.settings.privacy),
                "estimated_start": isoformat(estimates.get(job.id)),
                "waiting_for": waiting.get(job.id),
            }
            for job in pending
        ]

    async def _job_owners(self, sweep: Sweep) -> dict[tuple[str, int], str]:
        """GPU processes that belong to running gpuhive jobs: (host, pid) → job owner."""
        tasks = await self.run(self.store.jobs.tasks, ACTIVE)
        groups: dict[tuple[str, int | None], str] = {
            (t.host, t.pgid): t.owner for t in tasks if t.pgid
        }
        owners = {}
        for host, sample in sweep.samples.items():
            for proc in sample.processes:
                owner = groups.get((host, proc.pgid))
                if owner is not None:
                    owners[(host, proc.pid)] = owner
        return owners

    @staticmethod
    def templates() -> list[dict[str, Any]]:
        return [template.describe() for template in TEMPLATES.values()]

    async def list_jobs(self, user: str | None, status: str | None) -> list[Job]:
        jobs = await self.run(self.store.jobs.all, owner=user)
        return [j for j in jobs if status is None or j.status == status]

    async def preview_job(self, who: Identity, body: dict[str, Any]) -> list[dict[str, Any]]:
        _, specs = await self.run(self.jobs.build, who, body)
        return self.jobs.preview(specs)

    async def check_logins(self, user: str, hosts: Iterable[str]) -> dict[str, str | None]:
        """Per host: None when gpuhive can log in as `user` there, else the reason."""
        results: dict[str, str | None] = {}
        for host in sorted(set(hosts)):
            key = (host, user)
            if self._logins.get(key, 0.0) > time.monotonic():
                results[host] = None
                continue
            try:
                await self.pool.run(host, "true", user=user, timeout=10)
            except HostUnavailable as error:
                results[host] = error.reason
                continue
            self._logins[key] = time.monotonic() + 600
            results[host] = None
        return results

    async def _require_logins(self, user: str, hosts: Iterable[str]) -> None:
        problems = {h: r for h, r in (await self.check_logins(user, hosts)).items() if r}
        if problems:
            detail = "; ".join(f"{host}: {reason}" for host, reason in problems.items())
            raise Conflict(f"gpuhive cannot run jobs as {user} yet. {detail}")

    def public_key(self) -> str | None:
        """The public key users add to authorized_keys (None without SSH hosts)."""
        for path in self.settings.ssh.client_keys:
            try:
                with open(path + ".pub") as handle:
                    return handle.read().strip()
            except OSError:
                continue
        return None

    async def ssh_status(self, who: Identity) -> dict[str, Any]:
        ssh_hosts = [h.name for h in self.settings.hosts if h.transport == "ssh"]
        return {
            "public_key": self.public_key(),
            "hosts": await self.check_logins(who.name, ssh_hosts),
        }

    async def create_job(self, who: Identity, body: dict[str, Any]) -> Job:
        """Store a job; with `start: true` (and not queued or scheduled) run it at once."""
        job, specs = await self.run(self.jobs.build, who, body)
        await self._require_logins(job.owner, {spec.host for spec in specs})
        start = bool(body.get("start")) and not job.queued and job.start_at is None
        if start:  # checked before storing, so a refused start leaves nothing behind
            uuids = [g.uuid for spec in specs for g in spec.gpus]
            await self.run(self.jobs.check_run_now, job.owner, uuids, job.walltime)
        created = await self.run(self.store.jobs.create, job, specs)
        if start:
            return await self._start(created)
        return created

    async def get_job(self, job_id: int) -> Job:
        return await self.run(self.store.jobs.get, job_id)

    async def _owned_job(self, who: Identity, job_id: int, verb: str) -> Job:
        job = await self.get_job(job_id)
        self.jobs.may_act(who, job, verb)
        return job

    async def _start(self, job: Job) -> Job:
        report = await self.launcher.start(job)
        if not report.ok:
            raise Conflict(report.message, job=report.job.to_json(detail=True))
        self.integrations.job_started(report.job)
        return report.job

    async def start_job(self, who: Identity, job_id: int) -> Job:
        job = await self._owned_job(who, job_id, "start")
        if job.status in ("starting", "running", "stopping"):
            raise Conflict(f"Job {job_id} is already {job.status}.")
        await self.run(self.jobs.check_run_now, job.owner, job.gpus, job.walltime)
        await self._require_logins(job.owner, {task.host for task in job.tasks})
        if job.status != "pending":
            job = await self.run(self.store.jobs.reset, job_id)
        return await self._start(job)

    async def stop_job(self, who: Identity, job_id: int) -> Job:
        job = await self._owned_job(who, job_id, "stop")
        if job.status not in ("pending", "starting", "running", "stopping"):
            raise Conflict(f"Job {job_id} is {job.status}; there is nothing to stop.")
        return (await self.launcher.stop(job)).job

    async def delete_job(self, who: Identity, job_id: int) -> None:
        await self._owned_job(who, job_id, "delete")
        await self.run(self.store.jobs.delete, job_id)

    async def queue_job(self, who: Identity, job_id: int, queued: bool) -> Job:
        job = await self._owned_job(who, job_id, "queue" if queued else "dequeue")
        if queued and job.status in ("starting", "running", "stopping"):
            raise Conflict(f"Job {job_id} is {job.status}; stop it before queueing it.")
        return await self.run(
            functools.partial(self.store.jobs.update, job_id, by=who.name, queued=queued)
        )

    async def job_log(
        self, who: Identity, job_id: int, task_index: int, offset: int, tail: int | None
    ) -> dict[str, Any]:
        job = await self._owned_job(who, job_id, "read the log of")
        tasks = {t.index: t for t in job.tasks}
        if task_index not in tasks:
            raise Invalid(f"Job {job_id} has no task {task_index} (it has {len(tasks)}).")
        task = tasks[task_index]
        try:
            chunk = await self.launcher.log(task, offset=offset, tail=tail)
        except HostUnavailable as error:
            raise Unavailable(f"Cannot read the log on {error.host}: {error.reason}") from None
        return {
            "task": task_index,
            "text": chunk.text,
            "start": chunk.start,
            "next_offset": chunk.next_offset,
            "size": chunk.size,
            "state": task.state.value if hasattr(task.state, "value") else str(task.state),
            "attach": self.launcher.attach_hint(task),
        }

    def now(self) -> datetime:
        return utcnow()
