"""Jobs on Slurm nodes (issue #47): which of gpuhive's bookings holds a task's GPUs, as the
engine reservation its batch job runs in (`sbatch --reservation=gpuhive-N`).

The Slurm task runner (`hosts/runners/slurm.py`) submits, follows and cancels each task as a
batch job of its owner; the launcher asks `hold_of` how: the reservation and its end (the
job's time limit: Slurm starts no job in a reservation that would outlast it).

A count-only queued job with `"engine": "slurm"` goes to Slurm's own queue instead of
gpuhive's: the queue hands it over at once as one task with no GPUs on the cluster's first
node entry (`handover`), submitted as `sbatch --gres=gpu:N` with no node and no reservation;
Slurm picks the node. Once it runs, the launcher reads the node and GPU IDX Slurm gave it
(`squeue --json`) and `place` records them on the task: its host and GPUs are Slurm's, never
a guess (a node or IDX gpuhive does not know leaves the task unplaced, and says so).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..errors import Conflict, NotFound
from ..hosts.backends import backend_of
from ..hosts.backends.slurm import settings_of
from ..hosts.pool import HostPool
from ..hosts.runners import Placement
from ..model import Gpu, HostDecl, utcnow
from ..model.engines import engine_name
from ..model.jobs import Job, Task, TaskState
from ..store import Store
from .admission import CHOICE, ENGINE, SAME_HOST, GpuState, gpu_count, template_options
from .model import render_tasks
from .tasks import TaskSpec, TemplateError
from .template import command_fields

log = logging.getLogger(__name__)
Placer = Callable[[Task, Placement], Awaitable[bool]]  # the launcher's `place`
# the command's fields that name a task's host or GPUs: unknown until the engine places it
PLACED_FIELDS = ("host", "address", "gpus", "gpu_indices", "ngpus")


async def hold_of(store: Store, run: Callable[..., Awaitable[Any]], task: Task) -> dict[str, Any]:
    """How to submit `task` (TaskStart's fields): in the engine reservation (name, end) of
    the owner's booking that holds every GPU of it now; with none, in Slurm's own queue for
    its node; a task with no GPUs of a job for Slurm's queue, anywhere (`gpu_count` GPUs, its
    walltime as the time limit)."""
    now = utcnow()
    if not task.gpus:
        job: Job = await run(store.jobs.get, task.job_id)
        count = engine_count(job)
        if count is not None:
            until = None if job.walltime is None else now + job.walltime
            return {"gpu_count": count, "anywhere": True, "until": until}
    found = await run(store.reservations.window, now, now + timedelta(seconds=1),
                      owner=task.owner)  # fmt: skip
    wanted = set(task.gpus)
    for res in found:
        if res.cancelled or res.start > now or res.end <= now:
            continue
        if wanted <= {gpu.uuid for gpu in res.gpus}:
            return {"gpu_count": len(task.gpus), "hold": engine_name(res.id), "until": res.end}
    return {"gpu_count": len(task.gpus)}


async def no_hold(task: Task) -> dict[str, Any]:
    """The launcher's `hold_of` until the Jobs service sets it: no reservation."""
    return {"gpu_count": len(task.gpus)}


async def no_place(_task: Task, _placed: Placement) -> bool:
    """The launcher's `place` until the queue sets it: nothing recorded."""
    return False


def engine_count(job: Job) -> int | None:
    """The GPU count of a job its engine's queue places (None: gpuhive places its tasks)."""
    if engine_of(job.options) is None:
        return None
    try:
        return gpu_count(job.options)
    except ValueError:
        return None


class EngineStarts:
    """When a batch system (Slurm) expects to start the tasks that wait in its queue, as the
    launcher's last `sync` saw (by task id)."""

    def __init__(self) -> None:
        self._by_task: dict[int, datetime] = {}

    def note(self, task: Task, at: datetime | None) -> None:
        """Remember a task's expected start (None: it waits no more, or Slurm does not say)."""
        if at is None:
            self._by_task.pop(task.id, None)
        else:
            self._by_task[task.id] = at

    def of(self, job: Job) -> datetime | None:
        """When the last of the job's waiting tasks is expected to start (None: unknown)."""
        known = [at for t in job.tasks if t.active and (at := self._by_task.get(t.id))]
        return max(known) if known else None


def engine_of(options: Mapping[str, Any]) -> str | None:
    """The batch system whose queue a count-only job asks for (`options["engine"]`)."""
    value = options.get(ENGINE)
    return None if value is None else str(value)


def engine_hosts(hosts: Mapping[str, HostDecl], engine: str) -> list[HostDecl]:
    """The host entries whose backend is the batch system `engine` (its own queue, its own
    submissions), in the configuration's order."""
    found = []
    for decl in hosts.values():
        kind = backend_of(decl)
        if kind.submits_tasks and not kind.queues_here and kind.name == engine.lower():
            found.append(decl)
    return found


def engine_refusal(
    job: Job, count: int, hosts: Mapping[str, HostDecl], gpus: Sequence[Gpu]
) -> str | None:
    """Why a count-only job cannot go to its engine's queue (None: it can): the engine is
    unknown here, the job is not one plain batch job, its command names fields only a placed
    task knows, or no node has `count` GPUs."""
    engine = engine_of(job.options) or ""
    try:
        fields = command_fields(job.command)
    except TemplateError as error:
        return str(error)
    nodes = {decl.name for decl in engine_hosts(hosts, engine)}
    if not nodes:
        return (f"'engine' must name a batch system of this site's hosts (such as 'slurm'); "
                f"no host is a {engine!r} node.")  # fmt: skip
    if job.template != "plain" or job.sweep or job.container is not None or chosen(job):
        return (f"A job for {engine}'s queue runs as one batch job on one node: use the plain "
                "template, without sweeps, images, vendor, model or same_host.")  # fmt: skip
    unknown = [f"{{{name}}}" for name in fields if name in PLACED_FIELDS]
    if unknown:
        return (f"{', '.join(unknown)} is not known before {engine} places the job; use "
                "$SLURM_JOB_NODELIST and the GPUs Slurm pins in the command.")  # fmt: skip
    largest = max(Counter(g.host for g in gpus if g.host in nodes).values(), default=0)
    if count > largest:
        return (f"The job wants {count} GPUs on one {engine} node, but the largest node has "
                f"{largest}. Ask for at most {largest}.")  # fmt: skip
    return None


def chosen(job: Job) -> bool:
    """Whether a job asks gpuhive's queue to choose its GPUs' kind or spread."""
    return any(key in job.options for key in (SAME_HOST, *CHOICE))


def handover(job: Job, hosts: Mapping[str, HostDecl]) -> list[TaskSpec]:
    """The one task of a job for its engine's queue: on the first node entry (which submits
    it; Slurm picks the node), with no GPUs until `place` records Slurm's."""
    first = engine_hosts(hosts, engine_of(job.options) or "")[0]
    trial = replace(job, options=template_options(job.options))
    return render_tasks(trial, [(first.name, first.address, [])])


async def place(
    store: Store,
    run: Callable[..., Awaitable[Any]],
    hosts: Callable[[], Mapping[str, HostDecl]],
    task: Task,
    placed: Placement,
) -> bool:
    """Record the node and GPU IDXs Slurm gave a running task of its queue on the task
    (whether it did: a node or GPU gpuhive does not know, or another job than the one
    gpuhive submitted for it, leaves it unplaced)."""
    job_id, where = placed
    if job_id != task.handle:  # another job of the owner's of that name: not the task's
        return False
    by_node = {settings_of(decl)[0]: decl for decl in engine_hosts(hosts(), "slurm")}
    nodes = {node for node, _ in where}
    decl = by_node.get(next(iter(nodes))) if len(nodes) == 1 else None
    if decl is None:
        log.warning("gpuhive: Slurm ran task %s on %s, not one node gpuhive knows", task.id,
                    ", ".join(sorted(nodes)))  # fmt: skip
        return False
    found = [await run(store.inventory.gpu, f"{decl.name}:{index}") for _, index in where]
    if not found or any(gpu is None for gpu in found):
        log.warning("gpuhive: Slurm gave task %s GPUs %s that gpuhive does not list", task.id,
                    where)  # fmt: skip
        return False
    gpus = [gpu for gpu in found if gpu is not None]
    known = await run(store.inventory.host, decl.name)
    address = known.address if known else decl.name
    recorded: bool = await run(store.jobs.place_task, task.id, decl.name, address, gpus)
    return recorded


def placing(store: Store, pool: HostPool) -> Placer:
    """The launcher's `place`: on the store, with the pool's host entries."""
    return functools.partial(place, store, asyncio.to_thread, lambda: pool.hosts)


async def hand_over(
    store: Store,
    pool: HostPool,
    jobs: Sequence[Job],
    start_all: Callable[[Sequence[int]], Awaitable[list[str | None]]],
) -> tuple[list[int], dict[int, str]]:
    """Submit the pending jobs for an engine's queue to it, each as its one task with no
    GPUs (`handover`); the jobs handed over, and why the others were not."""
    todo: list[int] = []
    failures: dict[int, str] = {}
    for job in jobs:
        if not (job.queued and ENGINE in job.options and job.status == TaskState.PENDING):
            continue
        try:
            specs = handover(job, pool.hosts)
            await asyncio.to_thread(store.jobs.replace_tasks, job.id, specs)
        except (TemplateError, ValueError, IndexError, Conflict, NotFound) as error:
            failures[job.id] = f"could not hand the job over to its engine: {error}"
            continue
        todo.append(job.id)
    handed = []
    for job_id, outcome in zip(todo, await start_all(todo), strict=True):
        if outcome is None:
            handed.append(job_id)
            log.info("gpuhive queue: job %s handed to its engine's queue", job_id)
        else:
            failures[job_id] = outcome
    return handed, failures


def queued_elsewhere(pool: HostPool, host: str) -> str | None:
    """Why gpuhive's queue starts no job on `host` (its engine queues them), or None."""
    decl = pool.hosts.get(host)
    backend = None if decl is None else pool.backend_of(decl)
    if backend is None or backend.queues_here:
        return None
    return f"{host} is a {backend.name} node: its own queue runs jobs there, not gpuhive's"


def close_engine_nodes(
    pool: HostPool, gpus: Iterable[Gpu], states: dict[str, GpuState], unbookable: set[str]
) -> None:
    """Keep gpuhive's queue off the GPUs of hosts whose engine runs its own queue (Slurm's):
    unbookable for it, with why as their blocker."""
    elsewhere_of = {host: queued_elsewhere(pool, host) for host in pool.hosts}
    for gpu in gpus:
        elsewhere = elsewhere_of.get(gpu.host)
        if elsewhere is not None:
            unbookable.add(gpu.uuid)
            if gpu.uuid in states and states[gpu.uuid].blocker is None:
                states[gpu.uuid] = replace(states[gpu.uuid], blocker=elsewhere)
