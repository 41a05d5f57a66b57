"""Each host's GPU topology as it last reported it (its vendor's topology), cached in memory."""

from __future__ import annotations

import json
import threading

from sqlalchemy import Connection, delete, insert, select

from ..model import utcnow
from ..model.topology import Topology
from .database import Database
from .schema import host_topology, hosts


class TopologyStore:
    """Per host name, its `Topology`; the database is the truth, read once and on writes."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._cache: dict[str, Topology] | None = None

    def all(self) -> dict[str, Topology]:
        """Every host's topology, by host name (hosts that never reported one left out)."""
        with self._lock:
            cached = self._cache
        if cached is not None:
            return cached
        with self.db.read() as conn:
            rows = conn.execute(
                select(hosts.c.name, host_topology.c.spec).join(
                    host_topology, host_topology.c.host_id == hosts.c.id
                )
            ).all()
        found = {name: Topology.from_json(json.loads(spec)) for name, spec in rows}
        with self._lock:
            self._cache = found
        return found

    def cached(self) -> dict[str, Topology] | None:
        """`all()` as last read, or None when it must be read (no blocking call)."""
        with self._lock:
            return self._cache

    def forget(self) -> None:
        """Read the database again on the next call (another replica may have written)."""
        with self._lock:
            self._cache = None

    def get(self, host: str) -> Topology | None:
        return self.all().get(host)

    def put(self, host: str, topology: Topology, raw: str = "") -> bool:
        """Store what `host` reported; False when the host is unknown. Unchanged: no write."""
        if self.all().get(host) == topology:
            return True
        spec = json.dumps(topology.to_json(), sort_keys=True)

        def work(conn: Connection) -> bool:
            host_id = conn.execute(select(hosts.c.id).where(hosts.c.name == host)).scalar()
            if host_id is None:
                return False
            conn.execute(delete(host_topology).where(host_topology.c.host_id == host_id))
            conn.execute(insert(host_topology).values(host_id=host_id, spec=spec, raw=raw,
                                                      updated_at=utcnow()))  # fmt: skip
            return True

        done = self.db.write(work)
        with self._lock:
            self._cache = None
        return bool(done)
