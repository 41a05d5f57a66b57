"""The live-state answers: `GET hosts` (built once per sweep, shared by every request) and
`GET metrics` (the sampler's series)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from ..errors import Invalid
from ..hosts.pool import HostPool, HostStatus
from ..hosts.vendors import vendor_of
from ..model import Reservation, isoformat
from ..model.health import GpuCondition, condition_of, gpu_state
from ..model.shares import memory_of_share
from ..store import Store
from .holders import HolderCache
from .metrics import GPU_FIELDS, HOST_FIELDS
from .sampler import Sampler
from .slices import NOT_REPORTED, process_json, slice_views


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


def _shares_json(held: list[Reservation], memory_mib: int | None) -> list[dict[str, Any]]:
    """The shares held of a GPU now: holder, share and the memory it holds."""
    return [
        {**(_brief(part) or {}), "share": part.share,
         "memory_mib": memory_of_share(part.share_ppm, memory_mib)}
        for part in held
    ]  # fmt: skip


def _vendor_json(extra: dict[str, Any]) -> dict[str, Any]:
    """A host's GPU vendor and how a process there is pinned to its GPUs (%gpureserve's pin)."""
    vendor = vendor_of(extra)
    pin = vendor.pinning
    shown = {"variable": pin.visible, "counted": list(pin.counted), "env": dict(pin.fixed),
             "alloc_conf": pin.alloc_conf}  # fmt: skip  # a share's PyTorch cap (model/caps.py)
    return {"vendor": vendor.name, "pinning": shown}


class HostViews:
    """Answers about live state from the sampler, the inventory and the holders."""

    def __init__(
        self,
        store: Store,
        pool: HostPool,
        sampler: Sampler,
        holders: HolderCache,
        run_blocking: Callable[..., Awaitable[Any]],
    ) -> None:
        self.store, self.pool, self.sampler, self.holders = store, pool, sampler, holders
        self.run_blocking = run_blocking
        self._hosts_cache: tuple[Any, list[dict[str, Any]]] | None = None
        self._answer: tuple[Any, ...] = ()  # hosts(): (its inputs..., the answer)

    async def hosts(self, statuses: dict[str, HostStatus]) -> list[dict[str, Any]]:
        """Every host with its state, CPU/memory, GPUs, processes and who holds each GPU."""
        held = await self.holders.get()  # by GPU ref ("host:index"), as the JSON names them
        topology = self.store.topology.cached()  # read once: no thread hop for each poll
        if topology is None:
            topology = await self.run_blocking(self.store.topology.all)
        conditions = self.store.health.cached()  # fresh: no thread hop for each poll
        if conditions is None:
            conditions = await self.run_blocking(self.store.health.all)
        live = self._live_hosts(statuses)
        inputs = (live, self.holders.generation, topology, conditions)
        last = self._answer
        if (last and last[0] is live and last[1] == inputs[1] and last[2] is topology
                and last[3] == conditions):  # fmt: skip
            return last[-1]  # type: ignore[no-any-return]
        holder = {ref: cur for ref, (cur, _) in held.items() if cur is not None}
        following = {ref: nxt for ref, (_, nxt) in held.items() if nxt is not None}
        shares = self.holders.shares
        inventory = self.store.inventory

        def unit(item: dict[str, Any], host_state: str) -> dict[str, Any]:
            """One GPU or slice with its holders, health and state (model.health.gpu_state)."""
            found = inventory.gpu(item["id"])
            condition = None if found is None else condition_of(
                conditions, found.id, found.parent_id)  # fmt: skip
            now = holder.get(item["id"])
            extra: dict[str, Any] = {}
            if found is not None and found.shareable:  # who holds which share now (#44)
                extra["shares"] = _shares_json(shares.get(item["id"], []), found.memory_mib)
            return {
                **item,
                **extra,
                "reservation": _brief(now),
                "next_reservation": _brief(following.get(item["id"])),
                "health": (condition or GpuCondition(0)).to_json(),
                "state": gpu_state(condition, host_state, now is not None,
                                   bool(item.get("processes") or item.get("held_by_engine"))),
            }  # fmt: skip

        out = []
        for host in live:
            state = str(host.get("state") or "unknown")
            gpus = [
                {
                    **unit(gpu, state),
                    "slices": [unit(part, state) for part in gpu.get("slices", ())],
                }
                for gpu in host["gpus"]
            ]
            known = topology.get(host["name"])
            out.append({**host, "gpus": gpus, "topology": known.to_json() if known else None})
        self._answer = (*inputs, out)
        return out

    def _live_hosts(self, statuses: dict[str, HostStatus]) -> list[dict[str, Any]]:
        """Every host's live part of `hosts()` (no reservations), built once per sweep.

        It changes only with a sweep, the inventory or a host's state, so requests between
        sweeps share it (100s of hosts: most of the endpoint's work).
        """
        inventory = self.store.inventory
        key = (
            self.sampler.recorded,
            inventory.version,
            tuple(self.pool.hosts),
            tuple((n, s.state, s.error, s.failures) for n, s in statuses.items()),
        )
        if self._hosts_cache is not None and self._hosts_cache[0] == key:
            return self._hosts_cache[1]
        out = []
        for host in inventory.hosts():
            if host.name not in self.pool.hosts:
                continue  # no longer configured: its reservations stay, it has no live state
            live = self.sampler.live.get(host.name)
            sample = live.sample if live else None
            status = statuses.get(host.name)
            metrics = {g.uuid: g for g in sample.gpus} if sample else {}
            slice_refs = {part.uuid: part.ref for part in host.slices}
            procs: dict[str, list[dict[str, Any]]] = {}
            for p in sample.processes if sample else ():
                procs.setdefault(p.gpu_uuid or "", []).append(process_json(p, slice_refs))
            gpus = []
            for gpu in host.gpus:
                m = metrics.get(gpu.uuid)
                parts = [part for part in host.slices if part.parent_id == gpu.id]
                gpus.append(
                    {
                        **gpu.to_json(),
                        "util": m.util_gpu if m else None,
                        "util_label": NOT_REPORTED if m and m.util_gpu is None else None,
                        # {field: why} of each reading the driver did not report (never 0)
                        "not_reported": dict(m.unreported) if m else {},
                        "mem_used_mib": m.mem_used_mib if m else None,
                        "mem_total_mib": m.mem_total_mib if m else gpu.memory_mib,
                        "temperature_c": m.temperature_c if m else None,
                        "power_w": m.power_w if m else None,
                        "mig": list(sample.mig_uuids.get(gpu.uuid, ())) if sample else [],
                        "processes": procs.get(gpu.uuid, []),
                        "held_by_engine": sample.engine_held.get(gpu.uuid) if sample else None,
                        "slices": slice_views(sample, gpu, parts, slice_refs),
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
                    **_vendor_json(self.pool.hosts[host.name].extra),
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
        self._hosts_cache = (key, out)
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
        gpus = [g for h in hosts for g in h.units()]  # MIG slices too (util: null)
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
