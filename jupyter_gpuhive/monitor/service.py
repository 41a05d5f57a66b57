"""Monitor: runs the sampler, feeds discovery and usage, and answers live-state questions."""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from ..errors import Invalid
from ..hosts.guidance import advise
from ..hosts.pool import HostPool, HostStatus
from ..hosts.vendors import vendor_of
from ..model import GpuDecl
from ..model.gpus import FAILED, OK
from ..model.health import GpuCondition
from ..store import Store
from ..store.usage import GpuReading
from . import worker
from .containers import ContainerOwners
from .holders import HolderCache
from .prometheus import Exposition
from .published import encode
from .replicas import Publication
from .sampler import Listener, Sampler, Sweep
from .slices import discovered_slices, slice_decls
from .topology import TopologyReader
from .views import HostViews

log = logging.getLogger(__name__)
T = TypeVar("T")


async def nothing_to_reflag() -> None:
    """For a monitor with no bookings service: no reservation is ever re-flagged."""


def unwired(pool: HostPool) -> dict[str, Any]:
    """A monitor's wires where there is no bookings service and no site container rule (a
    monitor on its own: tests, benchmarks), said where it is built (`**unwired(pool)`)."""
    return {"reflag": nothing_to_reflag, "containers": ContainerOwners(pool)}


class Monitor:
    """Owns the sampler loop and turns sweeps into inventory, usage and live state."""

    def __init__(
        self,
        store: Store,
        pool: HostPool,
        run: Callable[..., Any],
        interval: float = 5.0,
        history: int = 720,
        public_key: Callable[[], str | None] = lambda: None,
        enabled: bool = True,
        *,
        reflag: Callable[[], Awaitable[Any]],
        containers: ContainerOwners,
    ) -> None:
        self.store = store
        self.enabled = enabled  # False: no sweeps here nor taken from a leader (monitor=False)
        self.pool = pool
        self._run = run
        self._public_key = public_key  # for the advice on hosts that refuse gpuhive's login
        self._report: tuple[list[dict[str, Any]], dict[str, Any]] | None = None  # report()
        self.sampler = Sampler(pool, interval=interval, history=history)
        self.sampler.on_sweep(self._after_sweep)
        # Charges container processes to their owners before anyone sees a sweep (the Hive
        # hands the site's rule and gpuhive's own containers: monitor/containers.for_site).
        self.containers = containers
        self.sampler.prepare = self._attribute
        self.topology = TopologyReader(store, pool, self.run_blocking)  # the vendor's topology
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._statuses: dict[str, HostStatus] = {}
        self._pending: Sweep | None = None
        self._telling: asyncio.Task[None] | None = None
        self._stopping = False
        self.holders = HolderCache(store, run, interval)  # current and next per GPU
        self.views = HostViews(store, pool, self.sampler, self.holders, self.run_blocking)
        # Sweeps published for (leader) or taken from (the others) every replica.
        self.publication = Publication(store, run, self._take_published, history, interval)
        # Re-checks the flags of reservations (the bookings service's, handed by the Hive);
        # runs when a re-partition removed MIG slices.
        self.reflag = reflag
        self.exposition = Exposition()  # GET prometheus (the Hive registers its sources)
        self.latency: dict[str, float] = {}  # seconds of each answering host's last probe
        # Told {gpu_id: GpuCondition} of the GPUs (and slices) whose health changed (the Hive).
        self.health_changed: Callable[[dict[int, Any]], Awaitable[Any]] | None = None

    def on_sweep(self, listener: Listener) -> None:
        """Call `listener` with every sweep, after the inventory and usage are recorded."""
        self.sampler.on_sweep(listener)

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._run(functools.partial(fn, *args))  # type: ignore[no-any-return]

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """Start sweeping in a child process of its own (idempotent).

        Probing 100s of hosts is a burst of SSH work per sweep; in the server's process it
        would hold up API requests (one interpreter, one GIL). The child probes with its own
        connections and sends each finished sweep back; samples are recorded and the
        listeners run here, on the server's loop.
        """
        if self._process is not None:
            return
        self._stopping = False
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe(duplex=False)
        self._process = ctx.Process(
            target=worker.main,
            args=(theirs, list(self.pool.hosts.values()), self.pool.settings,
                  self.sampler.interval, self.sampler.timeout),
            name="gpuhive-sampler",
            daemon=True,
        )  # fmt: skip
        self._process.start()
        theirs.close()
        self._conn = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._receive)

    def _receive(self) -> None:
        """(Server loop) a sweep arrived: record it, then let the listeners see it."""
        conn = self._conn
        if conn is None:
            return
        try:
            while conn.poll():
                sweep, statuses, body = conn.recv()  # what worker.main sends
                self._statuses = statuses
                self.sampler.take(sweep)
                self.publication.queue(sweep.at, body)
                self._pending = sweep
        except (EOFError, OSError):
            self._lost_worker()
            return
        if self._pending is not None and (self._telling is None or self._telling.done()):
            self._telling = asyncio.get_running_loop().create_task(self._tell())

    async def _tell(self) -> None:
        while self._pending is not None:
            sweep, self._pending = self._pending, None
            if await self._attribute(sweep):
                self.publication.replace(sweep.at, encode(sweep, self._statuses))
            await self.publication.publish()  # the other replicas see it before our listeners
            await self.sampler.tell_listeners(sweep)

    async def _attribute(self, sweep: Sweep) -> bool:
        """Charge the sweep's container processes to their owners, also in the live state."""
        try:
            if not await self.containers.attribute_sweep(sweep):
                return False
        except Exception:  # the sweep goes on unattributed rather than not at all
            log.exception("gpuhive: could not attribute containers")
            return False
        for host, sample in sweep.samples.items():
            live = self.sampler.live.get(host)
            if live is not None and live.sample is not None and live.updated_at == sample.taken_at:
                live.sample = sample
        self.sampler.recorded += 1  # the live state changed: GET hosts builds its answer anew
        return True

    def _take_published(self, sweep: Sweep, statuses: dict[str, HostStatus]) -> None:
        """Take a sweep the leader published, as the leader took it from its sampler."""
        self._statuses = statuses
        self.sampler.take(sweep)
        self.latency = dict(sweep.latency)

    # --- replicas --------------------------------------------------------------------------

    @property
    def _sweeping(self) -> bool:
        return self.enabled and bool(self.pool.hosts)

    async def follow(self) -> None:
        """Stop sweeping here and serve the leader's published sweeps (every replica until
        it leads; also while it has no hosts: a new host list reaches the leader first)."""
        await self.halt()
        if self.enabled:
            self.publication.follow()

    async def lead(self) -> None:
        """Take the last published sweeps, then sweep here (and publish) from now on."""
        await self.publication.unfollow()
        if not self._sweeping:
            return
        try:
            await self.publication.catch_up()
        except Exception:
            log.exception("gpuhive: could not read the published sweeps; the series starts anew")
        self.start()

    def _lost_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._conn is not None:
            loop.remove_reader(self._conn.fileno())
            self._conn.close()
        self._conn = None
        process, self._process = self._process, None
        if process is not None:
            process.join(0.1)
        if not self._stopping:
            log.error("gpuhive: the sampler process ended; starting a new one in 5 s")
            loop.call_later(5, lambda: None if self._stopping else self.start())

    async def halt(self) -> None:
        """Stop sweeping (the child closes its connections); the server's pool stays open."""
        self._stopping = True
        await self.publication.unfollow()
        conn, process = self._conn, self._process
        self._conn = self._process = None
        if conn is not None:
            asyncio.get_running_loop().remove_reader(conn.fileno())
            conn.close()
        if process is not None:
            await asyncio.get_running_loop().run_in_executor(None, process.join, 10)
            if process.is_alive():
                process.kill()
        if self._telling is not None:
            await asyncio.gather(self._telling, return_exceptions=True)
            self._telling = None

    async def stop(self) -> None:
        await self.halt()
        await self.pool.close()

    # --- after each sweep ----------------------------------------------------------------

    async def _after_sweep(self, sweep: Sweep) -> None:
        self.exposition.sweep_seconds.observe(sweep.duration)
        self.latency = dict(sweep.latency)
        await self._discover(sweep)
        await self._judge_health(sweep)
        await self._record_usage(sweep)

    async def _discover(self, sweep: Sweep) -> None:
        inventory = self.store.inventory
        changed: dict[str, tuple[GpuDecl, ...]] = {}
        for name, sample in sweep.samples.items():
            if sample.gpu_error or not sample.gpus or sample.lost:
                continue  # a lost GPU is judged (failed), never forgotten by discovery
            host = inventory.host(name)
            known = (
                tuple(
                    GpuDecl(g.index, g.uuid, g.model, g.memory_mib, slice_decls(inventory, g))
                    for g in host.gpus
                )
                if host
                else ()
            )
            held = {g.uuid: g.slices for g in known}
            found = tuple(
                GpuDecl(
                    g.index, g.uuid, g.name, g.mem_total_mib,
                    discovered_slices(sample, g.uuid, g.mig_enabled, held.get(g.uuid)),
                )
                for g in sorted(sample.gpus, key=lambda g: g.index)
            )  # fmt: skip
            if found != known:
                log.info("gpuhive: inventory of %s updated from discovery", name)
                changed[name] = found
        if changed:
            gone = await self.run_blocking(inventory.record_discoveries, changed)
            if gone:
                log.warning(
                    "gpuhive: MIG slices removed by a re-partition: %s",
                    ", ".join(g.ref for g in gone),
                )
                await self.reflag()
        answered = [n for n, s in sweep.samples.items() if s.gpus and not s.gpu_error]
        await self.topology.after_sweep(answered, changed)

    async def _judge_health(self, sweep: Sweep) -> None:
        """Each GPU's health from its host's sample; a listed-before GPU now missing (lost)
        is failed. Slices share their GPU's. Changes are stored and handed to the Hive."""
        inventory = self.store.inventory
        judged: dict[int, tuple[str, tuple[str, ...]]] = {}
        for name, sample in sweep.samples.items():
            host = inventory.host(name)
            if host is None or sample.gpu_error:
                continue  # the GPU tool unreadable: the host's GPUs are unknown, not judged
            seen = {g.uuid for g in sample.gpus}
            lost = tuple(message for _, message in sample.lost)
            decl = self.pool.hosts.get(name)
            tool = vendor_of(decl.extra if decl else None).tool_name
            for gpu in host.gpus:
                if gpu.uuid in seen:
                    health = sample.health.get(gpu.uuid)
                    found = (health.state, health.reasons) if health else (OK, ())
                else:
                    found = (FAILED, lost or (f"{tool} no longer lists this GPU",))
                for unit in (gpu, *inventory.slices_of(gpu)):
                    judged[unit.id] = found
        changed = await self._engine_drains(sweep) if judged else {}
        if not judged:
            return
        changed |= await self.run_blocking(self.store.health.record, judged)
        if changed:
            log.warning(
                "gpuhive: GPU health changed: %s",
                ", ".join(f"{inventory.gpu_by_id(g).ref} {c.state}" for g, c in changed.items()),
            )
            if self.health_changed is not None:
                await self.health_changed(changed)

    async def _engine_drains(self, sweep: Sweep) -> dict[int, GpuCondition]:
        """Drain the GPUs an engine under their host drained (Slurm), and end the drains it
        ended; an admin's own drain is never touched."""
        if all(sample.drainer is None for sample in sweep.samples.values()):
            return {}  # no engine speaks for any host's drains
        inventory, known = self.store.inventory, await self.run_blocking(self.store.health.all)
        changed: dict[int, GpuCondition] = {}
        for name, sample in sweep.samples.items():
            host = inventory.host(name)
            if host is None or sample.drainer is None:
                continue
            for gpu in host.gpus:
                want = sample.drained.get(gpu.uuid)
                for unit in (gpu, *inventory.slices_of(gpu)):
                    now = known.get(unit.id)
                    ours = now is not None and now.drained and now.drained_by == sample.drainer
                    fresh = now is None or not now.drained  # (an admin's drain stays theirs)
                    moved = ours and now is not None and now.drain_reason != want
                    if want is not None and (fresh or moved):
                        changed[unit.id] = await self.run_blocking(
                            self.store.health.drain, unit.id, True, sample.drainer, want
                        )
                    elif want is None and ours:
                        changed[unit.id] = await self.run_blocking(
                            self.store.health.drain, unit.id, False, sample.drainer, None
                        )
        return changed

    async def drain(self, gpu: str, drained: bool, by: str, reason: str | None) -> dict[str, Any]:
        """An admin drains a GPU (and its slices) for maintenance, or ends the drain."""
        found = self.store.inventory.gpu(gpu)
        if found is None or found.is_slice:
            raise Invalid(f"Unknown GPU '{gpu}'. Name a whole GPU as 'host:index' or by UUID.")
        changed = {}
        for unit in (found, *self.store.inventory.slices_of(found)):
            changed[unit.id] = await self.run_blocking(
                self.store.health.drain, unit.id, drained, by, reason
            )
        if self.health_changed is not None:
            await self.health_changed(changed)
        return {"gpu": found.ref, "uuid": found.uuid, **changed[found.id].to_json()}

    async def health(self) -> list[dict[str, Any]]:
        """Every GPU and slice with its health and drain (GET health)."""
        known = await self.run_blocking(self.store.health.all)
        return [
            {"gpu": unit.ref, "uuid": unit.uuid, "host": unit.host,
             **(known[unit.id] if unit.id in known else GpuCondition(unit.id)).to_json()}
            for unit in self.store.inventory.units()
        ]  # fmt: skip

    async def _record_usage(self, sweep: Sweep) -> None:
        inventory = self.store.inventory
        readings = []
        for sample in sweep.samples.values():
            owners: dict[str, set[str]] = {}
            for proc in sample.processes:
                for on in (proc.gpu_uuid, proc.mig_uuid):  # a slice's process: its GPU's too
                    if on and proc.user:
                        owners.setdefault(on, set()).add(proc.user)
            units = [(g.uuid, g.util_gpu, g.mem_used_mib, True) for g in sample.gpus]
            # MIG slices, for their reservations (the hourly table counts physical GPUs, which
            # their processes also occupy): memory per slice, no utilisation (NULL, never 0)
            units += [(m.uuid, None, m.mem_used_mib, False) for ms in sample.slices.values()
                      for m in ms if m.uuid]  # fmt: skip
            for uuid, util, mem, hourly in units:
                known = inventory.gpu(uuid)
                if known is None:
                    continue
                who = frozenset(owners.get(uuid, ()))
                readings.append(GpuReading(known.id, sweep.interval, util, mem, who, hourly))
        if not readings:
            return
        active = await self.run_blocking(
            self.store.reservations.window, sweep.at, sweep.at + timedelta(microseconds=1)
        )
        await self.run_blocking(self.store.usage.record, sweep.at, readings, active)

    # --- queries ------------------------------------------------------------------

    def _current_statuses(self) -> dict[str, HostStatus]:
        """The sweeper's host states (this replica's or, following, the leader's)."""
        if self._process is None and not self.publication.following:
            return self.pool.statuses()
        return {name: self._statuses.get(name) or HostStatus(name) for name in self.pool.hosts}

    def host_states(self) -> dict[str, str]:
        """Each configured host's state: 'up', 'down' or 'unknown' (not tried yet)."""
        statuses = self._current_statuses()
        return {name: s.state for name, s in statuses.items() if name in self.pool.hosts}

    async def report(self) -> dict[str, Any]:
        """The `GET hosts` answer: every host (see `hosts`) with advice where one is due; the
        same object while `hosts` is (requests share it) and no host is down (the advice for
        one names the current public key)."""
        hosts = await self.hosts()
        last = self._report
        if last is not None and last[0] is hosts:
            return last[1]
        report = advise(hosts, self._public_key)
        down = any(host.get("state") == "down" for host in hosts)
        self._report = None if down else (hosts, report)
        return report

    async def hosts(self) -> list[dict[str, Any]]:
        """Every host with its state, CPU/memory, GPUs, processes and who holds each GPU."""
        return await self.views.hosts(self._current_statuses())

    def metrics(self, host: str | None, gpu: str | None, since: datetime | None) -> dict[str, Any]:
        """Time series for the chosen host/GPU (all when none chosen) newer than `since`."""
        return self.views.metrics(host, gpu, since)
