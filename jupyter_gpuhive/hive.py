"""The Hive: the composition root. It builds the services, wires them, starts and stops them.

What a service does lives with it (bookings, jobs, monitor, protection, integrations, ...).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from .bookings.engines import PROTECTION, EngineBookings
from .bookings.fairshare import FairShare
from .bookings.identity import Identities
from .hive_settings import HiveSettings
from .hosts.pool import HostPool, SshSettings
from .integrations import Integrations
from .jobs.service import Jobs
from .kernels import images, lifecycle, registry
from .model import HostDecl, Reservation, utcnow
from .model.errand import in_executor
from .monitor import containers, scrape
from .monitor.accounting import Meter
from .monitor.service import Monitor
from .protection.health import HealthNotices
from .protection.service import Protection
from .store import Store
from .store.leader import Leadership

T = TypeVar("T")


class Hive:
    """The running gpuhive: store, services and their lifecycles."""

    def __init__(
        self, settings: HiveSettings, publish: Callable[[dict[str, Any]], Any] | None = None
    ) -> None:
        s = self.settings = settings
        self.store = Store(s.db_url)
        self.executor = ThreadPoolExecutor(s.workers, thread_name_prefix="gpuhive-db")
        self.identities = Identities(self.store, self.run, s.policy.authority, s.groups)
        identity_of = self.identities.identity_of
        self.pool = HostPool(s.hosts, s.ssh)
        self.integrations = Integrations(
            self.store, s.integrations, self.run, utcnow, s.http, s.privacy)  # fmt: skip
        self.jobs = Jobs(
            self.store, self.pool, self.run, s.policy.zone, identity_of, ssh=s.ssh,
            privacy=s.privacy, interval=s.poll_interval, changed=self.integrations.job_changed,
            preemption=s.preemption, preempted=self.integrations.job_preempted,
            stop_lending=lambda rid, by, why: self.bookings.stop_lending(rid, by, why),  # below
        )  # fmt: skip
        self.protection = Protection(
            s.protection, self.store, self.pool, self.run, publish=publish, lent=self.jobs.lent,
            job_owners=self.jobs.owners, public=s.privacy.public_violations, zone=s.policy.zone,
            end_reservation=self._end_reservation,  # through the bookings service, built next
            mail=s.integrations.mail, http=s.http, opened=self.integrations.violations_opened,
        )  # fmt: skip
        self.fairshare = FairShare(
            self.store, self.run, s.fairshare, s.policy.zone, identity_of, s.privacy,
            reflag=lambda *why: self.bookings.reflag(*why), unix_user=self.protection.unix_user,
        )  # fmt: skip
        self.bookings = EngineBookings(
            self.store, self.run, s.policy, identity_of, s.privacy, limits=self.fairshare.limits,
            remember=self.identities.remember, changed=self.integrations.reservation_event,
            unix_user=self.protection.unix_user, violations=self.protection.of_reservation,
            engine_of=self.pool.engine_of, told=self.integrations,  # Slurm follows bookings
        )  # fmt: skip
        self.meter = Meter(self.store, self.run, s.policy.zone, idle_util=s.protection.idle_util,
                           max_gap=s.fairshare.max_gap or max(60.0, 3 * s.poll_interval),
                           user_of=self.protection.gpuhive_user)  # fmt: skip
        self.kernels = registry.KernelRegistry(
            self.store, self.pool, self.run, identity_of=identity_of,
            unix_user=self.protection.unix_user, zone=s.policy.zone, reclaim=self.jobs.make_way,
        )  # fmt: skip
        self.kernel_life = lifecycle.end_policy(s.kernel_end, self.kernels, self.store, self.run,
                                      self.bookings, identity_of, s.protection.level)  # fmt: skip
        owners = containers.for_site(self.store, self.pool, self.run, s.protection,
                                     images.own_kernel_containers(self.kernels))  # fmt: skip
        self.monitor = Monitor(self.store, self.pool, self.run, s.poll_interval, s.history,
                               public_key=self.jobs.public_key, enabled=s.monitor,
                               reflag=self.bookings.repartitioned, containers=owners)  # fmt: skip
        for listener in (self.jobs.on_sweep, self.protection.on_sweep, self.meter.on_sweep,
                         self.bookings.on_sweep):  # fmt: skip
            self.monitor.on_sweep(listener)  # in this order, after inventory and usage
        scraped = scrape.sources(self.monitor, self.store, s.protection.idle_util)
        self.monitor.exposition.use(scraped)  # the same on every replica
        notices = HealthNotices.of(self.protection, self.store, self.run, self.bookings)
        self.monitor.health_changed = notices.then(self.integrations.health_changed, self.now)
        self.leadership = Leadership(s.db_url, self._lead, self._follow,
                                     interval=max(0.2, s.poll_interval / 2))  # fmt: skip

    def open(self) -> Hive:
        """Migrate the store and record the configured inventory (blocking)."""
        self.store.open()
        self.store.inventory.sync(self.settings.hosts)
        return self

    async def start(self) -> None:
        """Start leader election; the leader runs the background loops (monitoring)."""
        await self.monitor.follow()  # the live state the leader publishes, until this leads
        self.leadership.start()
        self.kernel_life.start()  # every server: its own kernels

    async def _lead(self) -> None:
        self.integrations.start()  # reminders: one server sends them
        await self.monitor.lead()  # sweeps here when monitoring is on and there are hosts

    async def _follow(self) -> None:
        await self.monitor.follow()
        self.protection.pause()  # a later lead resumes the open violations from the store
        await self.jobs.settle()

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
        await self.kernel_life.stop()
        await self.integrations.stop()
        await self.protection.stop()
        await self.monitor.stop()

    def close(self) -> None:
        """Release the database threads and connections (after `stop`)."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.store.close()

    async def _end_reservation(self, res: Reservation, reason: str) -> Reservation | None:
        """Protection ends a reservation: through the bookings service (its events follow)."""
        return await self.bookings.end(res.id, PROTECTION, reason)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking (database) work in the thread pool (a request's: see model/errand.py)."""
        work = functools.partial(fn, *args, **kwargs)
        return await in_executor(self.executor, work, self.store.db.commits)

    def now(self) -> datetime:
        """The current instant (UTC)."""
        return utcnow()
