"""Monitor: runs the sampler, feeds discovery and usage, and answers live-state questions."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..errors import Invalid
from ..hosts.pool import HostPool
from ..model import GpuDecl, Reservation, isoformat, utcnow
from ..store import Store
from ..store.usage import GpuReading
from .metrics import GPU_FIELDS, HOST_FIELDS
from .sampler import Sampler, Sweep

log = logging.getLogger(__name__)
T = TypeVar("T")


async def _drain() -> None:
    """Wait until every other task of the running loop has finished."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.gather(*others, return_exceptions=True)


def _brief(res: Reservation | None) -> dict[str, Any] | None:
    if res is None:
        return None
    return {
        "id": res.id,
        "owner": res.owner,
        "title": res.title,
        "start": isoformat(res.start),
        "end": isoformat(res.end),
    }


class Monitor:
    """Owns the sampler loop and turns sweeps into inventory, usage and live state."""

    def __init__(
        self,
        store: Store,
        pool: HostPool,
        run: Callable[..., Any],
        interval: float = 5.0,
        history: int = 720,
    ) -> None:
        self.store = store
        self.pool = pool
        self._run = run
        self.sampler = Sampler(pool, interval=interval, history=history)
        self.sampler.listeners.append(self._after_sweep)
        self._main: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._future: concurrent.futures.Future[None] | None = None

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._run(functools.partial(fn, *args))  # type: ignore[no-any-return]

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """Start sweeping on a thread of its own (idempotent).

        Probing 100s of hosts means a burst of SSH work per sweep; on the server's event
        loop it would hold up API requests for a second. The sampler therefore runs on its
        own event loop (its own connections, the monitoring account's), and only hands each
        finished sweep to the listeners, which run on the server's loop.
        """
        if self._thread is not None:
            return
        self._main = asyncio.get_running_loop()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="gpuhive-sampler", daemon=True
        )
        self._thread.start()
        self.sampler.pool = HostPool(list(self.pool.hosts.values()), self.pool.settings)
        self.sampler.dispatch = self._forward
        self._future = asyncio.run_coroutine_threadsafe(self.sampler.run(), self._loop)

    async def _forward(self, sweep: Sweep) -> None:
        """(Sampler thread) run the listeners on the server's loop and wait for them."""
        assert self._main is not None
        done = asyncio.run_coroutine_threadsafe(self.sampler.tell_listeners(sweep), self._main)
        await asyncio.wrap_future(done)

    async def halt(self) -> None:
        """Stop sweeping and close the sampler's connections; the server's pool stays open."""
        if self._thread is None or self._loop is None or self._future is None:
            return
        loop, thread, future = self._loop, self._thread, self._future
        future.cancel()
        # The cancelled sweep winds down on its own loop (probes kill their processes):
        # wait for every task there before closing connections and the loop.
        drained = asyncio.run_coroutine_threadsafe(_drain(), loop)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.wrap_future(drained), 10)
        closing = asyncio.run_coroutine_threadsafe(self.sampler.pool.close(), loop)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.wrap_future(closing), 5)
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 5)
        if not thread.is_alive():
            loop.close()
        self.sampler.pool, self.sampler.dispatch = self.pool, None
        self._thread = self._loop = self._future = None

    async def stop(self) -> None:
        await self.halt()
        await self.pool.close()

    # --- after each sweep ----------------------------------------------------------------

    async def _after_sweep(self, sweep: Sweep) -> None:
        await self._discover(sweep)
        await self._record_usage(sweep)

    async def _discover(self, sweep: Sweep) -> None:
        inventory = self.store.inventory
        for name, sample in sweep.samples.items():
            if sample.gpu_error or not sample.gpus:
                continue
            found = tuple(
                GpuDecl(g.index, g.uuid, g.name, g.mem_total_mib)
                for g in sorted(sample.gpus, key=lambda g: g.index)
            )
            host = inventory.host(name)
            known = (
                tuple(GpuDecl(g.index, g.uuid, g.model, g.memory_mib) for g in host.gpus)
                if host
                else ()
            )
            if found != known:
                log.info("gpuhive: inventory of %s updated from discovery", name)
                await self.run_blocking(inventory.record_discovery, name, found)

    async def _record_usage(self, sweep: Sweep) -> None:
        inventory = self.store.inventory
        readings = []
        for sample in sweep.samples.values():
            owners: dict[str, set[str]] = {}
            for proc in sample.processes:
                if proc.gpu_uuid and proc.user:
                    owners.setdefault(proc.gpu_uuid, set()).add(proc.user)
            for gpu in sample.gpus:
                known = inventory.gpu(gpu.uuid)
                if known is None:
                    continue
                readings.append(
                    GpuReading(
                        known.id,
                        sweep.interval,
                        gpu.util_gpu,
                        gpu.mem_used_mib,
                        frozenset(owners.get(gpu.uuid, ())),
                    )
                )
        if not readings:
            return
        active = await self.run_blocking(
            self.store.reservations.window, sweep.at, sweep.at + timedelta(microseconds=1)
        )
        await self.run_blocking(self.store.usage.record, sweep.at, readings, active)

    # --- queries ------------------------------------------------------------------

    async def hosts(self) -> list[dict[str, Any]]:
        """Every host with its state, CPU/memory, GPUs, processes and who holds each GPU."""
        now = utcnow()
        upcoming = await self.run_blocking(
            self.store.reservations.window, now, now + timedelta(days=30)
        )
        holder: dict[int, Reservation] = {}
        following: dict[int, Reservation] = {}
        for res in upcoming:
            for gpu in res.gpus:
                if res.start <= now:
                    holder[gpu.id] = res
                elif gpu.id not in following:
                    following[gpu.id] = res
        out = []
        statuses = self.sampler.pool.statuses()
        for host in self.store.inventory.hosts():
            live = self.sampler.live.get(host.name)
            sample = live.sample if live else None
            status = statuses.get(host.name)
            metrics = {g.uuid: g for g in sample.gpus} if sample else {}
            procs: dict[str, list[dict[str, Any]]] = {}
            for p in sample.processes if sample else ():
                procs.setdefault(p.gpu_uuid or "", []).append(
                    {"pid": p.pid, "user": p.user, "command": p.command,
                     "used_memory_mib": p.used_memory_mib}
                )  # fmt: skip
            gpus = []
            for gpu in host.gpus:
                m = metrics.get(gpu.uuid)
                gpus.append(
                    {
                        **gpu.to_json(),
                        "util": m.util_gpu if m else None,
                        "mem_used_mib": m.mem_used_mib if m else None,
                        "mem_total_mib": m.mem_total_mib if m else gpu.memory_mib,
                        "temperature_c": m.temperature_c if m else None,
                        "power_w": m.power_w if m else None,
                        "mig": list(sample.mig_uuids.get(gpu.uuid, ())) if sample else [],
                        "processes": procs.get(gpu.uuid, []),
                        "reservation": _brief(holder.get(gpu.id)),
                        "next_reservation": _brief(following.get(gpu.id)),
                    }
                )
            mem_used = None
            if sample and sample.mem_total_mib is not None and sample.mem_available_mib is not None:
                mem_used = sample.mem_total_mib - sample.mem_available_mib
            out.append(
                {
                    "name": host.name,
                    "address": host.address,
                    "port": host.port,
                    "transport": host.transport,
                    **(status.to_json() if status else {"state": "unknown"}),
                    "updated_at": isoformat(live.updated_at) if live else None,
                    "gpu_error": sample.gpu_error if sample else None,
                    "cpu_percent": live.cpu_percent if live else None,
                    "cpu_count": sample.cpu_count if sample else None,
                    "mem_used_mib": mem_used,
                    "mem_total_mib": sample.mem_total_mib if sample else None,
                    "gpus": gpus,
                }
            )
        return out

    def metrics(self, host: str | None, gpu: str | None, since: datetime | None) -> dict[str, Any]:
        """Time series for the chosen host/GPU (all when none chosen) newer than `since`."""
        inventory = self.store.inventory
        after = since.timestamp() if since else 0.0
        buffer = self.sampler.metrics
        hosts = inventory.hosts()
        if host is not None:
            hosts = [h for h in hosts if h.name == host]
            if not hosts:
                raise Invalid(f"Unknown host '{host}'.")
        gpus = [g for h in hosts for g in h.gpus]
        if gpu is not None:
            found = inventory.gpu(gpu)
            if found is None:
                raise Invalid(f"Unknown GPU '{gpu}'.")
            gpus, hosts = [found], []
        return {
            "interval": self.sampler.interval,
            "hosts": {h.name: buffer.to_json(f"host:{h.name}", HOST_FIELDS, after) for h in hosts},
            "gpus": {
                g.ref: {"uuid": g.uuid, **buffer.to_json(f"gpu:{g.uuid}", GPU_FIELDS, after)}
                for g in gpus
            },
        }
