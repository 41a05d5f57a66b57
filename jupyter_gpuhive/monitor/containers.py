"""Containers of GPU processes resolved once per sweep: the engine's word on each, then its owner.

The probe names the container of each GPU process from its cgroup (hosts/containers.py). Here
each host's engine is asked about the containers not seen before (one ``inspect`` per host and
sweep, batched; what it says is kept by container id: labels never change, and an id is never
reused), and each process is charged to the container's owner: its `user` becomes the owner
(or None, exempt), and the user it runs as is kept in ``container.process_user``. While the
engine does not answer about a container (down, a wrong binary or socket: logged), its
processes are charged to nobody, rather than to root as an unattributed container would be.
So violations, usage and the hosts listing all see the person, not the uid a container picked.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from ..hosts.containers import (
    GPUHIVE,
    LABEL,
    SUBUID,
    Container,
    SiteRule,
    attribute,
    engine_words,
    inspect_command,
    parse_inspect,
    subuid_owner,
    subuid_ranges,
)
from ..hosts.pool import HostPool, HostUnavailable
from ..hosts.probe import HostSample, ProcessInfo
from ..model.accounts import unix_account
from ..model.jobs import ACTIVE
from ..store import Store
from .sampler import Sweep

log = logging.getLogger(__name__)

# (host, container name) -> the gpuhive user whose running job it is.
OwnContainers = Callable[[], Awaitable[Mapping[tuple[str, str], str]]]


async def no_own_containers() -> dict[tuple[str, str], str]:
    return {}


class ContainerOwners:
    """Resolves and attributes the containers of each sweep's GPU processes."""

    def __init__(
        self,
        pool: HostPool,
        rule: SiteRule | None = None,
        own: OwnContainers = no_own_containers,
        unix_user: Callable[[str], str] = lambda name: name,
        timeout: float = 5.0,
        keep: int = 4096,
    ) -> None:
        self.pool = pool
        self.rule = rule or SiteRule()
        self.own = own
        self.unix_user = unix_user
        self.timeout = timeout
        self.keep = keep
        self.known: dict[tuple[str, str], Container | None] = {}  # (host, id) -> inspected
        self.uid_names: dict[tuple[str, int], str] = {}
        self.subuids: dict[str, tuple[float, list[tuple[int, int, str]]]] = {}  # host -> read
        self.subuid_seconds = 60.0  # how long a host's /etc/subuid is kept
        self.inspections = 0  # engine round trips (tests, benchmarks)
        self.silent: set[tuple[str, str]] = set()  # engines that did not answer (logged once)

    async def attribute_sweep(self, sweep: Sweep) -> bool:
        """Attribute every sample of `sweep` in place; True when one changed."""
        todo = {h: s for h, s in sweep.samples.items() if _unresolved(s)}
        if not todo:
            return False
        own = await self.own() if any(_rootful(s) for s in todo.values()) else {}
        done = await asyncio.gather(*(self.attribute_sample(s, own) for s in todo.values()))
        for host, sample in zip(todo, done, strict=True):
            sweep.samples[host] = sample
        return True

    async def attribute_sample(
        self, sample: HostSample, own: Mapping[tuple[str, str], str]
    ) -> HostSample:
        """The sample with each container process charged to its container's owner."""
        host = sample.host
        await self._inspect(host, [p.container for p in sample.processes if p.container])
        names = {name: owner for (h, name), owner in own.items() if h == host}
        uid_names = {uid: n for (h, uid), n in self.uid_names.items() if h == host}
        ranges = await self._subuids(host) if any(map(_numeric, sample.processes)) else []
        processes = []
        for proc in sample.processes:
            found = proc.container
            if found is None and _numeric(proc):
                processes.append(_in_user_namespace(proc, ranges))
                continue
            if found is None or found.source is not None:
                processes.append(proc)
                continue
            if found.rootless_uid is None and (host, found.id) not in self.known:
                # The engine did not answer (down, or a wrong binary or socket): nobody is
                # charged this sweep rather than blaming root for a gpuhive job's container.
                processes.append(
                    replace(proc, user=None, container=replace(found, process_user=proc.user))
                )
                continue
            seen = attribute(found, self.known.get((host, found.id)), names, self.rule, uid_names)
            if seen.source in (GPUHIVE, LABEL) and seen.owner is not None:
                seen = replace(seen, owner=self.unix_user(seen.owner))  # a gpuhive user
            seen = replace(seen, process_user=proc.user)
            processes.append(replace(proc, user=seen.owner, container=seen))
        self._forget(host, {p.container.id for p in sample.processes if p.container})
        return replace(sample, processes=tuple(processes))

    async def _inspect(self, host: str, found: list[Container]) -> None:
        """Ask the host's engines about the containers and rootless uids not known yet."""
        by_engine: dict[str, set[str]] = {}
        uids = set()
        for c in found:
            if c.rootless_uid is not None:
                if (host, c.rootless_uid) not in self.uid_names:
                    uids.add(c.rootless_uid)
            elif (host, c.id) not in self.known:
                by_engine.setdefault(c.engine, set()).add(c.id)
        if not by_engine and not uids:
            return
        engines = sorted(by_engine) or ["docker"]
        for i, engine in enumerate(engines):
            ids = by_engine.get(engine, set())
            command = inspect_command(
                engine_words(self.pool.hosts.get(host), engine), ids, uids if i == 0 else ()
            )
            try:
                result = await self.pool.run(host, command, timeout=self.timeout)
            except HostUnavailable as error:
                log.warning("gpuhive: cannot ask %s's %s about containers: %s", host, engine,
                            error.reason)  # fmt: skip
                continue
            self.inspections += 1
            seen, names = parse_inspect(result.stdout, engine)
            answered = _answered(result.stdout)
            if ids and not seen and not answered and (host, engine) not in self.silent:
                self.silent.add((host, engine))  # said once per host and engine
                log.warning("gpuhive: %s's %s did not answer about containers %s: %s", host,
                            engine, ", ".join(sorted(i[:12] for i in ids)),
                            (result.stderr or result.stdout).strip()[:200])  # fmt: skip
            for cid in ids:
                if cid in seen or answered:  # the engine answered: a missing id is not its
                    self.known[(host, cid)] = seen.get(cid)
            for uid, name in names.items():
                self.uid_names[(host, uid)] = name

    async def _subuids(self, host: str) -> list[tuple[int, int, str]]:
        """The host's /etc/subuid ranges (root's file), read again after `subuid_seconds`."""
        now = asyncio.get_running_loop().time()
        held = self.subuids.get(host)
        if held is not None and now - held[0] < self.subuid_seconds:
            return held[1]
        try:
            result = await self.pool.run(
                host, "cat /etc/subuid 2>/dev/null; true", timeout=self.timeout
            )
        except HostUnavailable:
            return held[1] if held else []
        ranges = subuid_ranges(result.stdout)
        self.subuids[host] = (now, ranges)
        return ranges

    def _forget(self, host: str, current: set[str]) -> None:
        """Drop what is kept about this host's containers that no GPU process runs in any more
        (once more than `keep` are kept)."""
        if len(self.known) <= self.keep:
            return
        for key in [k for k in self.known if k[0] == host and k[1] not in current]:
            del self.known[key]


def _answered(stdout: str) -> bool:
    """Whether the engine answered for every id (its exit status 0, printed after it)."""
    return "\n@@rc 0\n" in f"\n{stdout}"


def _numeric(proc: ProcessInfo) -> bool:
    """A process outside any container whose uid has no name on its host (`ps` prints it)."""
    return proc.container is None and bool(proc.user) and str(proc.user).isdigit()


def _in_user_namespace(proc: ProcessInfo, ranges: list[tuple[int, int, str]]) -> ProcessInfo:
    """A process with a subordinate uid, charged to the user whose range holds it."""
    uid = int(str(proc.user))
    owner = subuid_owner(uid, ranges)
    if owner is None:
        return proc
    box = Container("userns", "", uid, source=SUBUID, owner=owner, process_user=proc.user)
    return replace(proc, user=owner, container=box)


def _unresolved(sample: HostSample) -> bool:
    return any(
        (p.container is not None and p.container.source is None) or _numeric(p)
        for p in sample.processes
    )


def _rootful(sample: HostSample) -> bool:
    return any(
        p.container is not None and p.container.rootless_uid is None for p in sample.processes
    )


def own_containers(store: Store, run: Callable[..., Awaitable[Any]]) -> OwnContainers:
    """gpuhive's own running containers from the job table: a container job's active task is
    named after its screen session on its host (jobs/containers.py), and belongs to its owner."""

    async def read() -> dict[tuple[str, str], str]:
        tasks = await run(store.jobs.tasks, ACTIVE)
        in_images: dict[int, bool] = {}
        for task in tasks:
            if task.job_id not in in_images:
                job = await run(store.jobs.get, task.job_id)
                in_images[task.job_id] = getattr(job, "container", None) is not None
        return {(t.host, t.session): t.owner for t in tasks if in_images[t.job_id]}

    return read


def for_site(
    store: Store,
    pool: HostPool,
    run: Callable[..., Awaitable[Any]],
    settings: Any,
    *more: OwnContainers,
) -> ContainerOwners:
    """The container owners as the site configured them (`settings`: ProtectionSettings):
    gpuhive's own containers from the job table of `store` and from `more` (the kernels'
    registry: kernels.images.own_kernel_containers)."""
    rule = SiteRule(settings.container_owner_label, settings.unattributed_containers)
    user_map = dict(settings.user_map)
    sources = (own_containers(store, run), *more)

    async def own() -> dict[tuple[str, str], str]:
        found: dict[tuple[str, str], str] = {}
        for source in sources:
            found.update(await source())
        return found

    return ContainerOwners(pool, rule, own, functools.partial(unix_account, user_map))
