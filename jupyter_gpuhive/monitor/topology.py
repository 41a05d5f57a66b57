"""Reading each host's GPU topology (its vendor's `topology_command`) once it answers a sweep,
and again when its GPUs change; what cannot be read is logged and tried on the next change."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ..hosts.pool import HostPool
from ..hosts.vendors import vendor_of
from ..model.topology import TopologyError
from ..store import Store

log = logging.getLogger(__name__)


class TopologyReader:
    """Runs the vendor's topology command on hosts that have not reported their topology since
    this server started (or whose GPUs changed), and stores what it reads."""

    def __init__(self, store: Store, pool: HostPool, run: Callable[..., Any]) -> None:
        self.store = store
        self.pool = pool
        self.run = run
        self._read: set[str] = set()

    async def after_sweep(self, answered: Iterable[str], changed: Iterable[str]) -> None:
        """Read the topology of hosts seen for the first time or whose GPUs changed."""
        self._read -= set(changed)
        for host in sorted(set(answered) - self._read):
            self._read.add(host)
            decl = self.pool.hosts.get(host)
            vendor = vendor_of(decl.extra if decl else None)
            command = vendor.topology_command
            if command is None:
                continue
            try:
                result = await self.pool.run(host, command, timeout=20)
            except Exception as error:
                log.info("gpuhive: no topology from %s: %s", host, error)
                continue
            if result.exit_status != 0:
                log.info("gpuhive: %s: '%s' failed: %s", host, command, result.stderr.strip())
                continue
            try:
                topology = vendor.parse_topology(result.stdout)
            except TopologyError as error:
                log.info("gpuhive: %s: cannot read '%s': %s", host, command, error)
                continue
            await self.run(self.store.topology.put, host, topology, result.stdout)
