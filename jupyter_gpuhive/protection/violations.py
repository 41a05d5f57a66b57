"""Violation detection: a pure function of one sweep, the active reservations and running jobs.

Protection levels: 0 off; 1 a process on a reserved GPU whose owner is not the holder; 2 also
any process on a GPU nobody reserved. With MIG, each slice is judged on its own: a process on
my slice (or on any slice of a GPU I reserved whole) is mine to defend; one on a neighbouring
slice that someone else holds is not. The holder's own processes and the processes of the
holder's own gpuhive jobs never count, nor do allow-listed users and commands, nor the
processes of a preemptible job the reservation lends its GPUs to (`lent`: until the job is
stopped, the grace of a reclaim included; after it the job is killed). "Ghost"
occupancy (memory or utilization on a GPU that lists no process) is flagged at level 1 on
reserved GPUs and at level 2 on every GPU. On a GPU that bookings share, every share holder's
processes are theirs, a holder using more memory than the share is an over-share violation,
and anyone else is an intruder (overshare.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ..hosts.probe import HostSample, ProcessInfo
from ..model import Reservation, slice_name
from ..model.activity import IDLE_UTIL, gpu_busy
from ..model.gpus import GpuMetrics
from ..model.violations import FOREIGN, GHOST, IDLE, KINDS, OVER_SHARE, UNRESERVED, Violation
from . import overshare

__all__ = [
    "FOREIGN",
    "GHOST",
    "IDLE",
    "KINDS",
    "OVER_SHARE",
    "UNRESERVED",
    "DetectionPolicy",
    "GpuView",
    "JobOwners",
    "LentProcesses",
    "detect",
    "gpu_views",
    "holders",
    "idle_reservations",
    "same_name",
]

# (host, pid) -> the gpuhive user whose job runs that process.
JobOwners = Mapping[tuple[str, int], str]
# (host, pid) -> the reservation that lends its GPUs to the job that runs that process.
LentProcesses = Mapping[tuple[str, int], int]


def same_name(user: str) -> str:
    """The default mapping of gpuhive users to UNIX users: the identity."""
    return user


@dataclass(frozen=True)
class DetectionPolicy:
    """What counts as a violation."""

    level: int = 1
    allow_users: frozenset[str] = frozenset()
    allow_commands: tuple[re.Pattern[str], ...] = ()
    ghost_mem_mib: int = 1024  # 0: never flag memory without a process
    ghost_util: int = 10  # 0: never flag utilization without a process
    over_share_mib: int = 512  # a share holder may use this much more than the share

    @classmethod
    def build(
        cls,
        level: int = 1,
        allow_users: Collection[str] = (),
        allow_commands: Iterable[str] = (),
        ghost_mem_mib: int = 1024,
        ghost_util: int = 10,
        over_share_mib: int = 512,
    ) -> DetectionPolicy:
        """A policy from config values; bad values raise ValueError with a clear message."""
        if level not in (0, 1, 2):
            raise ValueError(f"protection level must be 0, 1 or 2, not {level!r}")
        patterns = []
        for text in allow_commands:
            try:
                patterns.append(re.compile(text))
            except re.error as error:
                raise ValueError(f"allow-listed command pattern {text!r}: {error}") from None
        if ghost_mem_mib < 0 or ghost_util < 0:
            raise ValueError("ghost thresholds must not be negative")
        if over_share_mib < 0:
            raise ValueError("the over-share tolerance must not be negative")
        return cls(level, frozenset(allow_users), tuple(patterns), ghost_mem_mib, ghost_util,
                   over_share_mib)  # fmt: skip

    def allows(self, proc: ProcessInfo) -> bool:
        """Whether the allow-list exempts this process."""
        if proc.user in self.allow_users:
            return True
        return any(p.search(proc.command or "") for p in self.allow_commands)


@dataclass(frozen=True)
class GpuView:
    """One GPU (or MIG slice) as a sweep saw it: its metrics and the processes on it.

    A slice's view has `parent` (the physical GPU's UUID) and `name` ('migGI' or 'migGI.CI');
    its metrics carry the slice's memory and no utilisation (the tool reports none).
    """

    host: str
    metrics: GpuMetrics
    processes: tuple[ProcessInfo, ...]
    parent: str | None = None
    name: str | None = None

    @property
    def ref(self) -> str:
        base = f"{self.host}:{self.metrics.index}"
        return base if self.name is None else f"{base}/{self.name}"


def gpu_views(samples: Iterable[HostSample]) -> dict[str, GpuView]:
    """Every GPU of the healthy samples by UUID with all its processes (those on its MIG slices
    too), and every MIG slice by its MIG UUID with the processes on that slice."""
    views: dict[str, GpuView] = {}
    for sample in samples:
        if sample.gpu_error:
            continue
        parent = {mig: gpu for gpu, migs in sample.mig_uuids.items() for mig in migs}
        procs: dict[str, list[ProcessInfo]] = {}
        for proc in sample.processes:
            if proc.gpu_uuid:
                procs.setdefault(parent.get(proc.gpu_uuid, proc.gpu_uuid), []).append(proc)
            if proc.mig_uuid:
                procs.setdefault(proc.mig_uuid, []).append(proc)
        for gpu in sample.gpus:
            views[gpu.uuid] = GpuView(sample.host, gpu, tuple(procs.get(gpu.uuid, ())))
            for mig in sample.slices.get(gpu.uuid, ()):
                if mig.uuid is None:
                    continue
                metrics = replace(
                    gpu, uuid=mig.uuid, util_gpu=None, util_mem=None,
                    mem_used_mib=mig.mem_used_mib, mem_total_mib=mig.mem_total_mib, mig=(),
                )  # fmt: skip
                name = slice_name(mig.gpu_instance_id, mig.compute_instance_id)
                found = tuple(procs.get(mig.uuid, ()))
                views[mig.uuid] = GpuView(sample.host, metrics, found, gpu.uuid, name)
    return views


def holders(active: Sequence[Reservation], at: datetime) -> dict[str, Reservation]:
    """GPU UUID -> the reservation holding it at `at`."""
    held: dict[str, Reservation] = {}
    for res in active:
        if not res.cancelled and res.start <= at < res.end:
            for gpu in res.gpus:
                held[gpu.uuid] = res
    return held


def detect(
    samples: Iterable[HostSample],
    active: Sequence[Reservation],
    at: datetime,
    policy: DetectionPolicy,
    *,
    job_owners: JobOwners | None = None,
    unix_user: Callable[[str], str] = same_name,
    lent: LentProcesses | None = None,
) -> list[Violation]:
    """The violations in one sweep, one per (kind, GPU, offender), as first seen at `at`."""
    if policy.level == 0:
        return []
    held = holders(active, at)
    shared = overshare.sharers(active, at)
    jobs = job_owners or {}
    found: list[Violation] = []
    views = gpu_views(samples)
    split = {view.parent for view in views.values() if view.parent is not None}
    for uuid, view in views.items():
        if uuid in shared:
            found += _shared(view, shared[uuid], at, policy, jobs, unix_user, lent or {})
            continue
        # A slice is held by its own reservation or by one of its whole GPU; processes on a
        # split GPU are judged on their slice (a neighbouring slice's holder is not the GPU's).
        res = held.get(uuid) or (held.get(view.parent) if view.parent else None)
        if res is None and policy.level < 2:
            continue
        holder, rid = (res.owner, res.id) if res else (None, None)
        holder_unix = unix_user(res.owner) if res else None
        offenders: dict[str, list[ProcessInfo]] = {}
        for proc in view.processes:
            if proc.user is None:
                continue  # gone before `ps` saw it: nobody to tell or stop
            if uuid in split and proc.mig_uuid is not None:
                continue  # judged on its slice's view
            if res is not None and proc.user in (holder_unix, res.owner):
                continue
            job_owner = jobs.get((view.host, proc.pid))
            if res is not None and job_owner is not None and job_owner == res.owner:
                continue
            if res is not None and lent and lent.get((view.host, proc.pid)) == res.id:
                continue
            if policy.allows(proc):
                continue
            offenders.setdefault(proc.user, []).append(proc)
        kind = FOREIGN if res else UNRESERVED
        for user, procs in sorted(offenders.items()):
            pids = tuple(sorted(p.pid for p in procs))
            commands = tuple(p.command for p in sorted(procs, key=lambda p: p.pid))
            where = _in_containers(procs)
            found.append(Violation(kind, view.host, view.ref, uuid, user, holder, rid,
                                   policy.level, pids, commands, where, at))  # fmt: skip
        ghost = _ghost(view, policy) if view.parent is None else None
        if ghost:
            found.append(Violation(GHOST, view.host, view.ref, uuid, None, holder, rid,
                                   policy.level, (), (), ghost, at))  # fmt: skip
    return found


def _shared(
    view: GpuView,
    shares: Sequence[Reservation],
    at: datetime,
    policy: DetectionPolicy,
    jobs: JobOwners,
    unix_user: Callable[[str], str],
    lent: LentProcesses,
) -> list[Violation]:
    """The violations on a GPU that bookings share: intruders (foreign, named to the first
    holder) and holders over their share (over-share); no ghosts (a share holder's idle
    process may keep memory)."""
    strangers, over = overshare.judge(
        view.host, view.processes, shares, unix_user=unix_user, job_owner=jobs.get,
        lent=lent.get, tolerance_mib=policy.over_share_mib,
    )  # fmt: skip
    first = shares[0]
    offenders: dict[str, list[ProcessInfo]] = {}
    for proc in strangers:
        if not policy.allows(proc) and proc.user is not None:
            offenders.setdefault(proc.user, []).append(proc)
    found = []
    for user, procs in sorted(offenders.items()):
        procs.sort(key=lambda p: p.pid)
        pids, commands = tuple(p.pid for p in procs), tuple(p.command for p in procs)
        found.append(Violation(FOREIGN, view.host, view.ref, view.metrics.uuid, user,
                               first.owner, first.id, policy.level, pids, commands,
                               _in_containers(procs), at))  # fmt: skip
    for use in over:
        pids = tuple(p.pid for p in use.processes)
        commands = tuple(p.command for p in use.processes)
        res = use.reservation
        found.append(Violation(OVER_SHARE, view.host, view.ref, view.metrics.uuid, use.user,
                               res.owner, res.id, policy.level, pids, commands,
                               use.detail(policy.over_share_mib), at))  # fmt: skip
    return found


def _in_containers(procs: Iterable[ProcessInfo]) -> str | None:
    """'in container NAME (ID12, image …; how its owner is known)' for those in containers,
    'inside Slurm job 12 (confined by it: reported, not stopped)' for those an engine's job
    holds."""
    procs = list(procs)
    seen = sorted({p.container.describe() for p in procs if p.container is not None})
    jobs = sorted({p.confined_by for p in procs if p.confined_by is not None})
    parts = ["in " + "; ".join(seen)] if seen else []
    if jobs:
        parts.append(f"inside {', '.join(jobs)} (confined by it: reported, not stopped)")
    return "; ".join(parts) or None


def _ghost(view: GpuView, policy: DetectionPolicy) -> str | None:
    """Why the GPU looks used although it lists no process, or None."""
    if view.processes:
        return None
    m = view.metrics
    reasons = []
    if policy.ghost_mem_mib and (m.mem_used_mib or 0) >= policy.ghost_mem_mib:
        reasons.append(f"{m.mem_used_mib} MiB of memory used")
    if policy.ghost_util and (m.util_gpu or 0) >= policy.ghost_util:
        reasons.append(f"{m.util_gpu}% utilization")
    if not reasons:
        return None
    return " and ".join(reasons) + " with no process listed"


def idle_reservations(
    samples: Iterable[HostSample],
    active: Sequence[Reservation],
    at: datetime,
    util_below: float = IDLE_UTIL,
) -> dict[int, Reservation]:
    """Active reservations whose every GPU was seen this sweep with no process and low load.

    A GPU the sweep did not see (host down, probe failed), or whose utilisation the driver
    does not report (MIG slices, GPUs in MIG mode), is never idle: nothing is ended on
    partial knowledge.
    """
    views = gpu_views(samples)
    idle: dict[int, Reservation] = {}
    for res in active:
        if res.cancelled or not (res.start <= at < res.end) or not res.gpus:
            continue
        if all(_idle(views.get(gpu.uuid), util_below) for gpu in res.gpus):
            idle[res.id] = res
    return idle


def _idle(view: GpuView | None, util_below: float) -> bool:
    if view is None:
        return False  # not seen: not known to be idle
    # utilisation not reported (MIG): not known to be idle either
    return gpu_busy(bool(view.processes), view.metrics.util_gpu, util_below) is False
