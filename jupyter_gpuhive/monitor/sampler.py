"""The sampler: sweeps every host with one probe, keeps live state and metric series."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..hosts.pool import HostPool, HostUnavailable
from ..hosts.probe import END, HostSample, parse_probe, probe_loop_command
from ..hosts.vendors import vendor_of
from ..model import utcnow
from ..model.gpus import GpuReadError
from .metrics import MetricsBuffer

log = logging.getLogger(__name__)


@dataclass
class HostLive:
    """The newest knowledge about one host."""

    sample: HostSample | None = None
    cpu_percent: float | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class Sweep:
    """One sweep: a sample per reachable host, a reason per unreachable one."""

    at: datetime
    interval: float
    samples: dict[str, HostSample] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)  # seconds of each host's probe
    duration: float = 0.0  # seconds the whole sweep took


Listener = Callable[[Sweep], Awaitable[None]]


def _cpu_percent(previous: HostSample | None, current: HostSample) -> float | None:
    if previous is None or previous.cpu_jiffies is None or current.cpu_jiffies is None:
        return None
    busy = current.cpu_jiffies[0] - previous.cpu_jiffies[0]
    total = current.cpu_jiffies[1] - previous.cpu_jiffies[1]
    return round(100.0 * busy / total, 1) if total > 0 else None


class Sampler:
    """Probes all hosts concurrently; a slow host only delays its own sample."""

    def __init__(
        self, pool: HostPool, interval: float = 5.0, history: int = 720, timeout: float = 0
    ) -> None:
        self.pool = pool
        self.interval = interval
        self.timeout = timeout or max(1.0, interval * 0.8)
        self.metrics = MetricsBuffer(history)
        self.live: dict[str, HostLive] = {name: HostLive() for name in pool.hosts}
        self._listeners: list[Listener] = []
        self.sweeps = 0
        self.recorded = 0  # samples taken in: live state is unchanged while this is
        self.health_seen: dict[str, tuple[str, str]] = {}  # parse_probe's `seen`
        # Runs on each sweep made here before the listeners (the Monitor's container owners).
        self.prepare: Callable[[Sweep], Awaitable[Any]] | None = None

    def on_sweep(self, listener: Listener) -> None:
        """Call `listener` with every sweep, after the listeners subscribed before it."""
        self._listeners.append(listener)

    async def _probe(self, name: str, latency: dict[str, float] | None = None) -> HostSample | str:
        began = asyncio.get_running_loop().time()
        try:
            # One long-lived probe loop per host: a sweep costs each host one request line.
            decl = self.pool.hosts.get(name)
            if decl is not None and self.pool.backend_of(decl).samples_itself:
                own = await self.pool.sample(name, self.timeout)  # an engine's view (Slurm)
                self.record(own)
                return own
            vendor = vendor_of(decl.extra if decl else None)
            answer = await self.pool.ask(name, probe_loop_command(vendor=vendor), end=END,
                                         timeout=self.timeout,
                                         say=vendor.held(self.health_seen, name))  # fmt: skip
        except HostUnavailable as error:
            return error.reason
        except Exception as error:  # one host's surprise must not cost the others their sample
            log.exception("gpuhive: probing %s failed", name)
            return f"the probe could not run: {type(error).__name__}: {error}"
        if latency is not None:
            latency[name] = asyncio.get_running_loop().time() - began
        taken = utcnow()
        try:
            sample = parse_probe(name, answer, taken, self.health_seen, vendor)
        except GpuReadError as error:
            sample = HostSample(name, taken, gpu_error=f"the probe failed: {error}")
        self.record(sample)
        return sample

    def record(self, sample: HostSample) -> None:
        """Take a sample into the live state and the metric series."""
        live = self.live.setdefault(sample.host, HostLive())
        self.recorded += 1
        live.cpu_percent = _cpu_percent(live.sample, sample)
        live.sample, live.updated_at = sample, sample.taken_at
        t = sample.taken_at.timestamp()
        used = None
        if sample.mem_total_mib is not None and sample.mem_available_mib is not None:
            used = sample.mem_total_mib - sample.mem_available_mib
        self.metrics.add(f"host:{sample.host}", t, (live.cpu_percent, used, sample.mem_total_mib))
        for gpu in sample.gpus:
            self.metrics.add(
                f"gpu:{gpu.uuid}",
                t,
                (gpu.util_gpu, gpu.mem_used_mib, gpu.temperature_c, gpu.power_w),
            )
            for part in sample.slices.get(gpu.uuid, ()):  # MIG: memory only, util not reported
                self.metrics.add(f"gpu:{part.uuid}", t, (None, part.mem_used_mib, None, None))

    async def sweep(self) -> Sweep:
        """Probe every host once, then tell the listeners."""
        at = utcnow()
        began = asyncio.get_running_loop().time()
        names = list(self.pool.hosts)
        latency: dict[str, float] = {}
        # A TaskGroup, unlike gather, waits for every probe to wind down when cancelled.
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._probe(n, latency)) for n in names]
        results = [task.result() for task in tasks]
        took = asyncio.get_running_loop().time() - began
        sweep = Sweep(at, self.interval, latency=latency, duration=took)
        for name, result in zip(names, results, strict=True):
            if isinstance(result, str):
                sweep.failures[name] = result
            else:
                sweep.samples[name] = result
        self.sweeps += 1
        if self.prepare is not None:
            await self.prepare(sweep)
        await self.tell_listeners(sweep)
        return sweep

    def take(self, sweep: Sweep) -> None:
        """Take in a sweep made elsewhere (the sweeping process): its samples, and count it."""
        for sample in sweep.samples.values():
            self.record(sample)
        self.sweeps += 1

    async def tell_listeners(self, sweep: Sweep) -> None:
        """Run every listener in turn; one that fails is logged and the others still run."""
        for listener in self._listeners:
            try:
                await listener(sweep)
            except Exception:
                log.exception("gpuhive: a sweep listener failed")

    async def run(self) -> None:
        """Sweep every `interval` seconds until cancelled; one failure never ends the loop."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("gpuhive: sweep failed; the sampler carries on")
            next_at = max(next_at + self.interval, loop.time())
            await asyncio.sleep(next_at - loop.time())
