"""The Hive: the composition root. It builds the services, wires them, starts and stops them.

What a service does lives with it (bookings, jobs, monitor, protection, integrations, ...).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from .bookings.fairshare import FairShare, FairShareSettings
from .bookings.identity import Identities
from .bookings.reservations import Policy
from .bookings.service import PROTECTION, SYSTEM, Bookings
from .hosts.pool import HostPool, SshSettings
from .integrations import Integrations, IntegrationSettings
from .jobs.service import Jobs
from .kernels.endpolicy import EndSettings
from .kernels.lifecycle import Lifecycle, extender
from .kernels.registry import KernelRegistry
from .model import HostDecl, Reservation, utcnow
from .model.health import GpuCondition
from .monitor.accounting import Meter
from .monitor.prometheus import Holding, LiveCounts, Sources
from .monitor.service import Monitor
from .privacy import Privacy
from .protection.service import Protection, ProtectionSettings
from .store import Store, livecounts
from .store.leader import Leadership

T = TypeVar("T")
MIG_CHANGED = "MIG slices re-partitioned"


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
    fairshare: FairShareSettings = field(default_factory=FairShareSettings)
    kernel_end: EndSettings = field(default_factory=EndSettings)
    metrics_token: str = ""  # the Prometheus scrape's bearer token ("": admins only)


class Hive:
    """The running gpuhive: store, services and their lifecycles."""

    def __init__(
        self, settings: HiveSettings, publish: Callable[[dict[str, Any]], Any] | None = None
    ) -> None:
        s = self.settings = settings
        self.store = Store(s.db_url)
        self.executor = ThreadPoolExecutor(s.workers, thread_name_prefix="gpuhive-db")
        self.identities = Identities(self.store, self.run, s.admin_users, s.admin_groups, s.groups)
        identity_of = self.identities.identity_of
        self.pool = HostPool(s.hosts, s.ssh)
        self.integrations = Integrations(self.store, s.integrations, self.run, utcnow, s.privacy)
        self.jobs = Jobs(
            self.store, self.pool, self.run, s.policy.zone, identity_of, ssh=s.ssh,
            privacy=s.privacy, interval=s.poll_interval, started=self.integrations.job_started,
        )  # fmt: skip
        self.monitor = Monitor(self.store, self.pool, self.run, s.poll_interval, s.history,
                               public_key=self.jobs.public_key)  # fmt: skip
        self.protection = Protection(
            s.protection, self.store, self.pool, self.run, publish=publish,
            job_owners=self.jobs.owners, public=s.privacy.public_violations,
            end_reservation=self._end_reservation,  # through the bookings service, built next
        )  # fmt: skip
        self.bookings = Bookings(
            self.store, self.run, s.policy, identity_of, s.privacy,
            remember=self.identities.remember, changed=self.integrations.reservation_event,
            unix_user=self.protection.unix_user, violations=self.protection.of_reservation,
        )  # fmt: skip
        self.fairshare = FairShare(
            self.store, self.run, s.fairshare, s.policy.zone, identity_of, s.privacy,
            reflag=self.bookings.reflag, unix_user=self.protection.unix_user,
        )  # fmt: skip
        self.bookings.reservations.limits = self.fairshare.limits  # checked in each booking
        self.monitor.reflag = functools.partial(self.bookings.reflag, SYSTEM, MIG_CHANGED)
        unix_names = {unix: name for name, unix in s.protection.user_map.items()}
        self.meter = Meter(
            self.store, self.run, s.policy.zone, idle_util=s.protection.idle_util,
            max_gap=s.fairshare.max_gap or max(60.0, 3 * s.poll_interval),
            user_of=lambda unix: unix_names.get(unix, unix),
        )  # fmt: skip
        self.kernels = KernelRegistry(
            self.store, self.pool, self.run, identity_of=identity_of,
            unix_user=self.protection.unix_user, zone=s.policy.zone,
        )  # fmt: skip
        self.kernel_life = Lifecycle(
            s.kernel_end, self.kernels, self.store, self.run, level=s.protection.level,
            extend=extender(self.bookings, identity_of, self.run),
        )  # fmt: skip
        self.kernels.subscribe(lambda event: self.kernel_life.kick())
        self.integrations.ongoing = self.protection.ongoing
        self.monitor.on_sweep(self.jobs.on_sweep)  # in this order, after inventory and usage
        self.monitor.on_sweep(self.protection.on_sweep)  # violations and idle reservations
        self.monitor.on_sweep(self.meter.on_sweep)  # GPU time and energy charged to payers
        self.monitor.on_sweep(self.integrations.on_sweep)  # webhook events
        self.monitor.exposition.use(self._prometheus_sources())
        self.monitor.health_changed = self._health_changed  # holders told (gpu.health)
        every = max(0.2, s.poll_interval / 2)
        self.leadership = Leadership(s.db_url, self._lead, self._follow, interval=every)

    def open(self) -> Hive:
        """Migrate the store and record the configured inventory (blocking)."""
        self.store.open()
        self.store.inventory.sync(self.settings.hosts)
        return self

    async def start(self) -> None:
        """Start leader election; the leader runs the background loops (monitoring)."""
        self.leadership.start()
        self.kernel_life.start()  # every server: its own kernels

    async def _lead(self) -> None:
        self.integrations.start()  # reminders: one server sends them
        if self.settings.monitor and self.settings.hosts:
            self.monitor.start()

    async def _follow(self) -> None:
        await self.monitor.halt()
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

    def _prometheus_sources(self) -> Sources:
        """What GET prometheus reads: the monitor's live state and a few aggregates."""
        live = self.monitor.sampler.live
        return Sources(
            live=lambda: [h.sample for h in list(live.values()) if h.sample is not None],
            inventory=self.store.inventory.hosts,
            host_state=self.monitor.host_states,
            latency=lambda: self.monitor.latency,
            health=self._health_by_uuid,
            counts=self._live_counts,
            idle_util=self.settings.protection.idle_util,
        )

    def _health_by_uuid(self) -> dict[str, tuple[str, bool]]:
        """{unit UUID: (health state, drained)} of the units not plainly ok."""
        units = self.store.inventory
        return {
            units.gpu_by_id(g).uuid: (c.state, c.drained)
            for g, c in self.store.health.all().items()
        }

    async def _health_changed(self, changed: dict[int, GpuCondition]) -> None:
        """Tell the holders of reservations (active or in the next week) on GPUs whose health
        or drain changed: a `gpu.health` webhook event each."""
        now = utcnow()
        held = await self.run(
            self.store.reservations.window, now, now + timedelta(days=7), gpu_ids=list(changed)
        )
        for gpu_id, condition in changed.items():
            gpu = self.store.inventory.gpu_by_id(gpu_id)
            if gpu.is_slice:
                continue  # told once, for the whole GPU
            mine = [r for r in held if any(g.id == gpu_id or g.parent_id == gpu_id for g in r.gpus)]
            state = "drained" if condition.drained else condition.state
            text = f"{gpu.ref} is {state}" + (
                f": {'; '.join(condition.reasons)}" if condition.reasons else ""
            )
            public = {"gpu": gpu.ref, "uuid": gpu.uuid, **condition.to_json()}
            for owner in sorted({r.owner for r in mine}):
                ids = [r.id for r in mine if r.owner == owner]
                await self.integrations.webhooks.emit(
                    "gpu.health", {**public, "reservations": ids}, [owner], text + ".", None
                )
            await self.integrations.webhooks.emit("gpu.health", public, [], text + ".", public)

    def _live_counts(self) -> LiveCounts:
        """Reservations, holdings, waiting jobs and open violations (blocking reads)."""
        db, now = self.store.db, utcnow()
        queued, oldest = livecounts.waiting_jobs(db)
        kinds: dict[str, int] = {}
        for item in self.protection.ongoing():
            kinds[str(item.get("kind"))] = kinds.get(str(item.get("kind")), 0) + 1
        return LiveCounts(
            reservations=livecounts.reservation_counts(db, now),
            holdings=tuple(Holding(*row) for row in livecounts.holdings(db, now)),
            queued=queued,
            queue_wait_max_s=(now - oldest).total_seconds() if oldest else 0.0,
            violations=kinds,
        )

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking (database) work in the hive's thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    def now(self) -> datetime:
        """The current instant (UTC)."""
        return utcnow()
