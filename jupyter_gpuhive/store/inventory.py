"""Hosts and GPUs: the inventory survives hosts going offline."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from sqlalchemy import Connection, insert, select, update

from ..model import Gpu, GpuDecl, Host, HostDecl, utcnow
from .database import INVENTORY_LOCK, Database, inserted_id
from .schema import gpus, hosts
from .slices import sync_slices


class Inventory:
    """Hosts and their GPUs, cached in memory; the database is the truth."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._hosts: dict[str, Host] = {}
        self._by_id: dict[int, Gpu] = {}
        self._by_key: dict[str, Gpu] = {}
        self._removed: frozenset[int] = frozenset()
        self._declared: dict[str, HostDecl] = {}  # the hosts as configured, by name
        self.version = 0  # counts reloads: what was built from the inventory is current while
        # it stays the same

    def reload(self) -> None:
        """Re-read hosts, GPUs and MIG slices from the database (one snapshot: another
        replica may be writing hosts meanwhile)."""
        with self.db.snapshot() as conn:
            host_rows = conn.execute(select(hosts).order_by(hosts.c.name)).all()
            gpu_rows = conn.execute(
                select(gpus).order_by(
                    gpus.c.host_id, gpus.c.idx, gpus.c.gpu_instance_id, gpus.c.compute_instance_id
                )
            ).all()
        names = {row.id: row.name for row in host_rows}
        by_host: dict[int, list[Gpu]] = {}
        slices_by_host: dict[int, list[Gpu]] = {}
        by_id: dict[int, Gpu] = {}
        by_key: dict[str, Gpu] = {}
        removed: set[int] = set()
        parents = {row.id: row for row in gpu_rows if row.parent_id is None}
        for row in gpu_rows:
            if row.parent_id is None:
                gpu = Gpu(
                    row.id, names[row.host_id], row.idx, row.uuid, row.model, row.memory_mib,
                    shareable=row.shareable,
                )  # fmt: skip
                by_host.setdefault(row.host_id, []).append(gpu)
            else:
                parent = parents[row.parent_id]
                gpu = Gpu(
                    row.id, names[row.host_id], parent.idx, row.uuid, parent.model,
                    row.memory_mib, row.parent_id, row.profile, row.gpu_instance_id,
                    row.compute_instance_id,
                )  # fmt: skip
                if row.removed_at is not None:
                    removed.add(row.id)
                    by_id[gpu.id] = gpu
                    continue
                slices_by_host.setdefault(row.host_id, []).append(gpu)
            by_id[gpu.id] = gpu
            by_key[gpu.ref] = by_key[gpu.uuid] = gpu
            if gpu.is_slice:  # also 'host:index/migGI.0'
                by_key[f"{gpu.parent_ref}/mig{gpu.gpu_instance_id}.{gpu.compute_instance_id}"] = gpu
        host_map = {
            row.name: Host(
                row.name,
                row.address,
                row.port,
                row.username,
                row.transport,
                tuple(by_host.get(row.id, [])),
                tuple(slices_by_host.get(row.id, [])),
            )
            for row in host_rows
        }
        with self._lock:
            self._hosts, self._by_id, self._by_key = host_map, by_id, by_key
            self._removed = frozenset(removed)
            self.version += 1

    def hosts(self) -> list[Host]:
        """All hosts with their GPUs, by name."""
        return list(self._hosts.values())

    def host(self, name: str) -> Host | None:
        return self._hosts.get(name)

    def gpus(self) -> list[Gpu]:
        """All GPUs, ordered by host and index."""
        return [gpu for host in self._hosts.values() for gpu in host.gpus]

    def units(self) -> list[Gpu]:
        """Every bookable unit: each GPU followed by its live MIG slices, by host and index."""
        return [unit for host in self._hosts.values() for unit in host.units()]

    def slices_of(self, gpu: Gpu) -> list[Gpu]:
        """The live MIG slices of a physical GPU."""
        host = self._hosts.get(gpu.host)
        return [s for s in host.slices if s.parent_id == gpu.id] if host else []

    def removed(self, gpu: Gpu) -> bool:
        """Whether `gpu` is a slice a re-partition removed."""
        return gpu.id in self._removed

    def gpu(self, key: str) -> Gpu | None:
        """A GPU by 'host:index' or UUID, a live slice by 'host:index/migGI[.CI]' or MIG UUID."""
        found = self._by_key.get(key)
        if found is None:
            self.reload()
            found = self._by_key.get(key)
        return found

    def gpu_by_id(self, gpu_id: int) -> Gpu:
        found = self._by_id.get(gpu_id)
        if found is None:
            self.reload()
            found = self._by_id[gpu_id]
        return found

    def sync(self, declared: Iterable[HostDecl]) -> None:
        """Upsert configured hosts and their declared GPUs; nothing is ever deleted."""
        decls = list(declared)
        self._declared = {decl.name: decl for decl in decls}

        def work(conn: Connection) -> None:
            self.db.take_turns(conn, INVENTORY_LOCK)  # replicas started together sync at once
            for decl in decls:
                _upsert_host(conn, decl)

        self.db.write(work)
        self.reload()

    def record_discoveries(self, found: Mapping[str, Iterable[GpuDecl]]) -> list[Gpu]:
        """Store what discovery found on several hosts: one transaction, one reload (a
        server's first sweep discovers every host at once). Returns the slices it removed."""
        decls = []
        for name, gpus_found in found.items():
            host = self._hosts.get(name)
            if host is not None:
                decls.append(
                    HostDecl(host.name, host.address, host.port, host.user, host.transport,
                             tuple(gpus_found))
                )  # fmt: skip
        if not decls:
            return []

        def work(conn: Connection) -> list[int]:
            self.db.take_turns(conn, INVENTORY_LOCK)
            gone: list[int] = []
            for decl in decls:
                gone += _upsert_host(conn, decl, seen=True, config=self._declared.get(decl.name))
            return gone

        gone = self.db.write(work)
        self.reload()
        return [self.gpu_by_id(g) for g in gone]


def shareable(config: HostDecl, gpu: GpuDecl) -> bool:
    """Whether the site lets bookings share `gpu` (as its host's configuration says: its own
    entry there first, then the host's `shareable`)."""
    declared = next((g for g in config.gpus if g.index == gpu.index), gpu)
    return config.shares(declared if declared.shareable is not None else gpu)


def _upsert_host(
    conn: Connection, decl: HostDecl, seen: bool = False, config: HostDecl | None = None
) -> list[int]:
    """Write one host and its GPUs (and slices, where discovery looked); the removed slices.
    `config`: the host as configured, which says which GPUs are shareable (None: as they are;
    `decl` when it is the configuration itself)."""
    if not seen:
        config = decl
    now = utcnow()
    values = {
        "address": decl.address,
        "port": decl.port,
        "username": decl.user,
        "transport": decl.transport,
    }
    if seen:
        values["last_seen_at"] = now
    host_id = conn.execute(select(hosts.c.id).where(hosts.c.name == decl.name)).scalar()
    if host_id is None:
        host_id = conn.execute(
            insert(hosts).values(name=decl.name, declared=True, created_at=now, **values)
        ).inserted_primary_key[0]  # type: ignore[index]
    else:
        conn.execute(update(hosts).where(hosts.c.id == host_id).values(**values))
    existing = {
        row.idx: row
        for row in conn.execute(
            select(gpus).where(gpus.c.host_id == host_id, gpus.c.parent_id.is_(None))
        )
    }
    gone: list[int] = []
    for gpu in decl.gpus:
        row = existing.get(gpu.index)
        fields = {
            "uuid": gpu.uuid,
            "model": gpu.model,
            "memory_mib": gpu.memory_mib,
            "shareable": (
                shareable(config, gpu) if config is not None else bool(row and row.shareable)
            ),
        }
        if row is None:
            gpu_id = inserted_id(
                conn.execute(insert(gpus).values(host_id=host_id, idx=gpu.index, **fields))
            )
        else:
            gpu_id = row.id
            if tuple(row._mapping[k] for k in fields) != tuple(fields.values()):
                conn.execute(update(gpus).where(gpus.c.id == row.id).values(**fields))
        if gpu.slices is not None:
            gone += sync_slices(conn, host_id, gpu.index, gpu_id, gpu.slices, now)
    return gone
