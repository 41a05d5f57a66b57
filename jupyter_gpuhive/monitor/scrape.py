"""What a Prometheus scrape reads (`prometheus.Sources`): the monitor's live state, GPU health
and the store's live counts, with open violations counted by kind (all from the store or the
published sweeps: the same on every replica)."""

from __future__ import annotations

from ..model import utcnow
from ..model.violations import OFFENCES
from ..store import Store
from .prometheus import Holding, LiveCounts, Sources
from .service import Monitor


def sources(monitor: Monitor, store: Store, idle_util: float) -> Sources:
    """The scrape's sources over a monitor and a store."""
    live = monitor.sampler.live

    def health() -> dict[str, tuple[str, bool]]:
        """{unit UUID: (health state, drained)} of the units not plainly ok."""
        units = store.inventory
        return {
            units.gpu_by_id(g).uuid: (c.state, c.drained) for g, c in store.health.all().items()
        }

    def counts() -> LiveCounts:
        """Reservations, holdings, waiting jobs and open violations (blocking reads)."""
        reads, now = store.live_counts, utcnow()
        queued, oldest = reads.waiting_jobs()
        return LiveCounts(
            reservations=reads.reservation_counts(now),
            holdings=tuple(Holding(*row) for row in reads.holdings(now)),
            queued=queued,
            queue_wait_max_s=(now - oldest).total_seconds() if oldest else 0.0,
            violations=reads.open_violations(OFFENCES),
        )

    return Sources(
        live=lambda: [h.sample for h in list(live.values()) if h.sample is not None],
        inventory=store.inventory.hosts,
        host_state=monitor.host_states,
        latency=lambda: monitor.latency,
        health=health,
        counts=counts,
        idle_util=idle_util,
    )
