"""The Prometheus exposition (`GET prometheus`): built from the live state the sampler holds.

A scrape reads no host and no metric series: GPUs and slices come from the newest sample of each
host (`Sampler.live`), host state from the pool, health from the store's cached health table.
Reservations, the queue and open violations are cheap aggregate reads handed in by the Hive
(`Sources`). Label cardinality is bounded: per GPU or slice of the inventory, per host, per
user with live reservations or queued jobs, per violation kind, per route of the route table;
a reservation id appears only on `gpuhive_gpu_reservation_info`, one series per held unit.
See docs/reference/prometheus.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

MIB = 1024 * 1024
GPU_LABELS = ("host", "gpu", "uuid", "model")
HEALTH_STATES = ("ok", "degraded", "failed")
SWEEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class Holding:
    """An active reservation on one unit (GPU or slice), by UUID."""

    uuid: str
    reservation: int
    user: str


@dataclass(frozen=True)
class LiveCounts:
    """The cheap aggregates one scrape reads: reservations, holdings, queue, violations."""

    reservations: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (user, state)
    holdings: tuple[Holding, ...] = ()
    queued: Mapping[str, int] = field(default_factory=dict)  # per user
    queue_wait_max_s: float = 0.0
    violations: Mapping[str, int] = field(default_factory=dict)  # open ones, per kind


@dataclass
class Sources:
    """Where a scrape reads from (the Hive fills them in); every callable is synchronous."""

    live: Callable[[], Iterable[Any]]  # HostSample of each host that answered
    inventory: Callable[[], Iterable[Any]]  # Host (with .gpus and .slices)
    host_state: Callable[[], Mapping[str, str]]  # host -> 'up' | 'down' | 'unknown'
    latency: Callable[[], Mapping[str, float]]  # host -> seconds of its last probe
    health: Callable[[], Mapping[str, tuple[str, bool]]] = dict  # uuid -> (state, drained)
    counts: Callable[[], LiveCounts] = LiveCounts
    idle_util: float = 5.0  # a held unit below this utilisation (%) is idle


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class HiveCollector(Collector):
    """Yields every gpuhive series from `Sources` at scrape time."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        s = self.sources
        util = _gauge("gpuhive_gpu_utilization_percent", "GPU utilisation (%)", GPU_LABELS)
        used = _gauge("gpuhive_gpu_memory_used_bytes", "GPU or slice memory in use", GPU_LABELS)
        total = _gauge("gpuhive_gpu_memory_total_bytes", "GPU or slice memory", GPU_LABELS)
        power = _gauge("gpuhive_gpu_power_watts", "GPU power draw", GPU_LABELS)
        temp = _gauge("gpuhive_gpu_temperature_celsius", "GPU temperature", GPU_LABELS)
        health = _gauge(
            "gpuhive_gpu_health", "1 for the unit's health state (ok, degraded, failed)",
            (*GPU_LABELS, "state"),
        )  # fmt: skip
        drained = _gauge("gpuhive_gpu_drained", "1 when an admin drained the unit", GPU_LABELS)
        held = _gauge(
            "gpuhive_gpu_reservation_info", "1 per unit held by an active reservation",
            ("host", "gpu", "uuid", "reservation", "user"),
        )  # fmt: skip
        samples = {sample.host: sample for sample in s.live()}
        states = s.health()
        units: dict[str, tuple[str, ...]] = {}
        for host in s.inventory():
            for unit in (*host.gpus, *host.slices):
                units[unit.uuid] = (host.name, unit.ref, unit.uuid, unit.model or "")
        for uuid, names in units.items():
            state, is_drained = states.get(uuid, ("ok", False))
            for name in HEALTH_STATES:
                health.add_metric([*names, name], 1.0 if state == name else 0.0)
            drained.add_metric(list(names), 1.0 if is_drained else 0.0)
        util_of: dict[str, float | None] = {}
        for sample in samples.values():
            for gpu in sample.gpus:
                labels: tuple[str, ...] | None = units.get(gpu.uuid)
                if labels is None:
                    continue
                util_of[gpu.uuid] = gpu.util_gpu
                for family, value, scale in (
                    (util, gpu.util_gpu, 1),
                    (used, gpu.mem_used_mib, MIB),
                    (total, gpu.mem_total_mib, MIB),
                    (power, gpu.power_w, 1),
                    (temp, gpu.temperature_c, 1),
                ):
                    if value is not None:
                        family.add_metric(list(labels), float(value) * scale)
                for part in sample.slices.get(gpu.uuid, ()):
                    of_part = units.get(part.uuid or "")
                    if of_part is None:
                        continue
                    for family, value in ((used, part.mem_used_mib), (total, part.mem_total_mib)):
                        if value is not None:
                            family.add_metric(list(of_part), float(value) * MIB)
        yield from (util, used, total, power, temp, health, drained)

        up = _gauge("gpuhive_host_up", "1 when the host answered its last probe", ("host",))
        for name, state in s.host_state().items():
            up.add_metric([name], 1.0 if state == "up" else 0.0)
        latency = _gauge(
            "gpuhive_host_probe_seconds", "Seconds the host's last probe took", ("host",)
        )
        for name, seconds in s.latency().items():
            latency.add_metric([name], seconds)
        yield from (up, latency)

        counts = s.counts()
        reservations = _gauge(
            "gpuhive_reservations", "Live reservations per user (active or upcoming)",
            ("user", "state"),
        )  # fmt: skip
        for (user, state), n in sorted(counts.reservations.items()):
            reservations.add_metric([user, state], float(n))
        idle: dict[str, set[int]] = {}
        busy: set[int] = set()
        for holding in counts.holdings:
            of_unit = units.get(holding.uuid)
            if of_unit is not None:
                held.add_metric([*of_unit[:3], str(holding.reservation), holding.user], 1.0)
            value = util_of.get(holding.uuid)
            if value is not None and value >= s.idle_util:
                busy.add(holding.reservation)
            elif holding.uuid in util_of:
                idle.setdefault(holding.user, set()).add(holding.reservation)
        idle_family = _gauge(
            "gpuhive_reservations_idle",
            "Active reservations whose reported GPUs are all below the idle threshold, per user",
            ("user",),
        )
        for user, ids in sorted(idle.items()):
            idle_family.add_metric([user], float(len(ids - busy)))
        yield from (reservations, idle_family, held)

        queue = _gauge("gpuhive_queue_jobs", "Queued jobs waiting for GPUs, per user", ("user",))
        for user, n in sorted(counts.queued.items()):
            queue.add_metric([user], float(n))
        length = _gauge("gpuhive_queue_length", "Queued jobs waiting for GPUs")
        length.add_metric([], float(sum(counts.queued.values())))
        wait = _gauge("gpuhive_queue_wait_seconds_max", "How long the oldest queued job waited")
        wait.add_metric([], counts.queue_wait_max_s)
        violations = _gauge("gpuhive_violations_open", "Open violations per kind", ("kind",))
        for kind, n in sorted(counts.violations.items()):
            violations.add_metric([kind], float(n))
        yield from (queue, length, wait, violations)


class Exposition:
    """One registry per hive: the collector plus the sweep and API latency histograms."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.sweep_seconds = Histogram(
            "gpuhive_sweep_duration_seconds", "Seconds one sweep over every host took",
            buckets=SWEEP_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.api_seconds = Histogram(
            "gpuhive_api_request_duration_seconds", "REST API latency per route and method",
            ("route", "method"), buckets=API_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._collector: HiveCollector | None = None

    def use(self, sources: Sources) -> None:
        """Register (or replace) the collector that reads `sources`."""
        if self._collector is not None:
            self.registry.unregister(self._collector)
        self._collector = HiveCollector(sources)
        self.registry.register(self._collector)

    def render(self) -> bytes:
        """The text exposition format (version 0.0.4) of every series."""
        return generate_latest(self.registry)
