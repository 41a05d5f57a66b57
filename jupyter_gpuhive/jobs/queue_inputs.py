"""What the queue's admission pass reads, as plain values: the snapshot of one tick, GPU states,
reserved spans, the candidate jobs, the access-rule check, and binding chosen GPUs to tasks."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo

from ..bookings import access
from ..bookings.access import Rule
from ..errors import Invalid
from ..model import Gpu, Identity, Reservation
from ..model.gpus import Pinning
from ..model.jobs import Job, TaskState
from ..model.shares import parse_memory
from ..monitor.sampler import Sweep
from ..store import Store
from .admission import (
    ENGINE,
    FOREVER,
    AccessCheck,
    Candidate,
    GpuState,
    gpu_count,
    same_host,
    template_options,
)
from .model import render_tasks
from .preemption import Lending
from .selection import GpuChoice, choice_of, matching
from .tasks import GpuSlot, TaskSpec

Spans = dict[str, list[tuple[float, float]]]


@dataclass
class Snapshot:
    """What a tick reads from the store and the sweep, as the pure pass takes it."""

    now: datetime
    jobs: list[Job]
    marked: dict[int, str]
    gpus: dict[str, GpuState]
    reserved: Spans
    inventory: dict[str, Gpu]
    rules: list[Rule]
    identities: dict[str, Identity]
    lending: Lending | None = None  # bookings and loans, when a preemptible job is about
    vendors: dict[str, str] = field(default_factory=dict)  # each configured host's GPU vendor
    unbookable: frozenset[str] = frozenset()  # GPUs failed or drained: given to no job


def candidates(
    jobs: Iterable[Job],
    now: datetime,
    default_walltime: timedelta,
    min_length: float = 0.0,
    *,
    inventory: Mapping[str, Gpu] | None = None,
    vendors: Mapping[str, str] | None = None,
    attained: bool = False,
) -> list[Candidate]:
    """The pending queued jobs as the pass takes them (those past their stop time left out).
    A count-only job that names a vendor or model gets only the GPUs of `inventory` (by
    UUID) that match, each host's vendor from `vendors` (without `inventory`: any GPU).
    `attained`: each preempted job carries the service it has had (`served`), which the
    order reads (least attained service); else none does."""
    out = []
    at = now.timestamp()
    for job in jobs:
        if not job.queued or job.status != TaskState.PENDING or ENGINE in job.options:
            continue  # (a job for an engine's queue goes there: `slurm.hand_over`)
        if job.stop_at is not None and job.stop_at <= now:
            continue
        try:
            count = gpu_count(job.options) or 0
        except ValueError:
            continue
        length = max((job.walltime or default_walltime).total_seconds(), min_length)
        start = job.start_at.timestamp() if job.start_at else 0.0
        end = max(at, start) + length
        if job.stop_at is not None:
            end = min(end, job.stop_at.timestamp())
        try:
            placement = same_host(job.options) if count else None
        except ValueError:
            placement = None
        created = job.created_at.timestamp() if job.created_at else 0.0
        gpus = () if count else job.gpus
        try:
            choice = choice_of(job.options) if count else GpuChoice()
        except ValueError:
            continue  # it was checked when it was made: a vendor since removed
        only = None
        if choice and inventory is not None:
            only = frozenset(g.uuid for g in matching(choice, inventory.values(), vendors or {}))
        had, back = served(job, now) if attained else (0.0, 0.0)
        memory = share_memory(job, count)
        if memory is not None and inventory is not None:  # a share job: shareable GPUs only
            shareable = frozenset(g.uuid for g in inventory.values() if g.shareable)
            only = shareable if only is None else only & shareable
        out.append(Candidate(job.id, job.owner, created, end, gpus, count, start, placement,
                             attained=had, requeued=back, only=only, memory=memory))  # fmt: skip
    return out


def share_memory(job: Job, count: int) -> int | None:
    """The MiB of a share job (a queued job of one GPU that asks `memory`), else None."""
    asked = job.options.get("memory")
    if asked is None or count != 1:
        return None
    try:
        return parse_memory(asked)
    except Invalid:
        return None  # checked when it was made


def served(job: Job, now: datetime) -> tuple[float, float]:
    """The GPU-seconds a job has run over its preempted runs and its current one (its
    attained service), and when it was last preempted (0: never)."""
    preempted = [e for e in job.history if e.kind == "preempted"]
    if not preempted:
        had, since, back = 0.0, None, 0.0
    else:
        had = sum(e.gpu_s or 0.0 for e in preempted)
        since, back = preempted[-1].at, preempted[-1].at.timestamp()
    for task in job.tasks:
        if task.started_at is not None and (since is None or task.started_at > since):
            ran = ((task.ended_at or now) - task.started_at).total_seconds()
            had += len(task.gpus) * max(0.0, ran)
    return had, back


def booked(store: Store, start: datetime, end: datetime) -> list[tuple[str, datetime, datetime]]:
    """(GPU UUID, start, end) of every booking overlapping [start, end), slices' parents and
    whole GPUs' slices included (`Reservations.booked_units`)."""
    return store.reservations.booked_units(start, end)


def bookings_of(reservations: Iterable[Reservation]) -> list[tuple[str, datetime, datetime]]:
    """(GPU UUID, start, end) per GPU of each reservation, as `booked` returns them."""
    return [(gpu.uuid, r.start, r.end) for r in reservations for gpu in r.gpus]


def reserved_spans(
    bookings: Iterable[tuple[str, datetime, datetime]], jobs: Iterable[Job] = ()
) -> Spans:
    """Per GPU UUID, the spans that keep queued jobs off it: bookings and planned runs."""
    spans: Spans = {}
    for uuid, low, high in bookings:
        spans.setdefault(uuid, []).append((low.timestamp(), high.timestamp()))
    for job in jobs:
        if job.queued or job.start_at is None or job.status != TaskState.PENDING:
            continue
        end = job.stop_at.timestamp() if job.stop_at else FOREVER
        for uuid in job.gpus:
            spans.setdefault(uuid, []).append((job.start_at.timestamp(), end))
    for found in spans.values():
        found.sort()
    return spans


def gpu_states(
    gpus: Iterable[Gpu],
    reserved: Mapping[str, Sequence[tuple[float, float]]],
    jobs: Iterable[Job],
    sweep: Sweep | None,
    now: datetime,
    *,
    default_walltime: timedelta | None = None,
    ended: Collection[tuple[str, int]] = (),
    left: Collection[tuple[str, str]] = (),
) -> dict[str, GpuState]:
    """Each GPU's state: who holds it (active tasks, then foreign processes) and next booking.

    Without a sweep (monitoring off) only the store's claims are known. A running queued job
    releases its GPUs at its walltime (`default_walltime` when it declared none). Processes of
    the (host, process group)s in `ended`, tasks seen to end after the sweep was taken, are
    leaving: they hold nothing (else a wide job's slot would look unknown for a tick, and
    jobs behind it could pass it). So are processes without an owner (no user, no process
    group: the GPU tool listed them, but they were gone when the probe ran `ps`) on a
    (host, GPU) in `left`, the GPUs of those tasks.
    """
    at = now.timestamp()
    holder: dict[str, Job] = {}
    holders: dict[str, list[Job]] = {}  # several when share jobs share the GPU
    group_of: dict[tuple[str, int], int] = {}  # (host, process group) -> job id
    owner_on: dict[tuple[str, str, str], int] = {}  # (host, owner, GPU) -> job id
    for job in jobs:
        for task in job.tasks:
            if task.active:
                for uuid in task.gpus:
                    holder[uuid] = job
                    if job not in holders.setdefault(uuid, []):
                        holders[uuid].append(job)
                    owner_on[(task.host, task.owner, uuid)] = job.id
                if task.pgid is not None:
                    group_of[(task.host, task.pgid)] = job.id
    foreign: dict[str, str] = {}
    left = set(left)
    if sweep is not None:
        for host, sample in sweep.samples.items():
            for proc in sample.processes:
                places = (proc.gpu_uuid, getattr(proc, "mig_uuid", None))
                if (
                    proc.user is None
                    and getattr(proc, "pgid", None) is None
                    and any((host, on) in left for on in places)
                ):
                    continue  # it left with the task that ended on that GPU
                # A process on a MIG slice keeps its slice busy as well as its GPU.
                for on in places:
                    if on is None or on in foreign:
                        continue
                    pgid = getattr(proc, "pgid", None)
                    if pgid is not None and (host, pgid) in ended:
                        continue
                    if pgid is not None:
                        owner = group_of.get((host, pgid))
                    else:
                        owner = owner_on.get((host, proc.user or "", on))
                    held = [j.id for j in holders.get(on, ())]
                    if owner not in held:
                        who = proc.user or "an unknown user"
                        whose = f"job {owner}" if owner is not None else who
                        foreign[on] = f"process {proc.pid} of {whose}"
    out: dict[str, GpuState] = {}
    for gpu in gpus:
        spans = reserved.get(gpu.uuid, ())
        free_until = next((low for low, high in spans if high > at), FOREVER)
        blocker: str | None = None
        release: float | None = None
        running = holder.get(gpu.uuid)
        if running is not None:
            blocker = f"{gpu.ref} runs job {running.id}"
            release = _release(running, at, default_walltime)
        elif gpu.uuid in foreign:
            blocker = f"{gpu.ref} runs {foreign[gpu.uuid]}"
        elif sweep is not None:
            probed = sweep.samples.get(gpu.host)
            if probed is None:
                why = sweep.failures.get(gpu.host, "it was not probed")
                blocker = f"{gpu.host} did not answer the last sweep: {why}"
            elif probed.gpu_error:
                blocker = f"the GPUs of {gpu.host} cannot be read: {probed.gpu_error}"
        room = _share_room(gpu, holders.get(gpu.uuid, []), blocker, gpu.uuid in foreign)
        out[gpu.uuid] = GpuState(
            gpu.uuid, gpu.host, gpu.index, gpu.ref, blocker, free_until, release, room
        )
    return out


def _share_room(gpu: Gpu, running: list[Job], blocker: str | None, foreign: bool) -> int | None:
    """MiB share jobs may still take on a shareable GPU that is free or runs share jobs only
    (None: not for share jobs: not shareable, memory unknown, or anything else on it)."""
    if not gpu.shareable or gpu.memory_mib is None or foreign:
        return None
    if blocker is not None and not running:
        return None  # down, unreadable: nothing is known of it
    used = [share_memory(job, 1) for job in running]
    if any(mib is None for mib in used):
        return None  # a whole-GPU job runs there
    return max(0, gpu.memory_mib - sum(mib or 0 for mib in used))


def _release(job: Job, at: float, default_walltime: timedelta | None = None) -> float | None:
    """When a running job will likely let go of its GPUs (None: nobody knows)."""
    ends = []
    if job.stop_at is not None:
        ends.append(job.stop_at.timestamp())
    started = [t.started_at for t in job.tasks if t.started_at is not None]
    walltime = job.walltime or default_walltime
    if job.queued and walltime is not None and started:
        ends.append(min(started).timestamp() + walltime.total_seconds())
    found = min(ends) if ends else None
    return found if found is not None and found > at else None


class RuleCheck(AccessCheck):
    """The access rules over a snapshot; the answer depends only on which rules apply and
    the end, so it is memoised per (rules that apply to owner and GPU, end)."""

    def __init__(self, snap: Snapshot, zone: tzinfo) -> None:
        self.snap = snap
        self.zone = zone
        self._applying: dict[tuple[str, str], tuple[int, ...]] = {}
        self._covered: dict[tuple[tuple[int, ...], float], bool] = {}

    def restricted(self, owner: str) -> bool:
        who = self.snap.identities.get(owner)
        return bool(self.snap.rules) and (who is None or not who.is_admin)

    def allows(self, owner: str, uuid: str, end: float) -> bool:
        rules = self.snap.rules
        applying = self._applying.get((owner, uuid))
        if applying is None:
            who = self.snap.identities.get(owner) or Identity(owner)
            gpu = self.snap.inventory[uuid]
            applying = tuple(
                i for i, r in enumerate(rules) if r.applies_to(who) and r.covers_gpu(gpu)
            )
            self._applying[(owner, uuid)] = applying
        found = self._covered.get((applying, end))
        if found is None:
            start, until = self.snap.now, datetime.fromtimestamp(end, UTC)
            spans = [s for i in applying for s in rules[i].spans(start, until, self.zone)]
            found = access.first_gap(access.merge(spans), start, until) is None
            self._covered[(applying, end)] = found
        return found


def bind(
    job: Job,
    chosen: Sequence[Gpu],
    store: Store,
    pinnings: Mapping[str, Pinning] | None = None,
    mps: Collection[str] = (),
) -> list[TaskSpec]:
    """Render a count-only job's tasks for the GPUs admission chose (`pinnings`: each host's
    vendor's, by host; `mps`: the hosts running the vendor's multi-process service)."""
    by_host: dict[str, list[GpuSlot]] = {}
    for gpu in chosen:
        found = store.inventory.host(gpu.host)
        address = found.address if found else gpu.host
        by_host.setdefault(gpu.host, []).append(GpuSlot(gpu.host, address, gpu.index, gpu.uuid))
    layout = [(host, slots[0].address, slots) for host, slots in by_host.items()]
    memory = {gpu.uuid: gpu.memory_mib for gpu in chosen}  # a share job's caps (jobs/caps.py)
    options = template_options(job.options)
    return render_tasks(
        replace(job, options=options), layout, pinnings=pinnings, mps=mps, gpu_memory=memory
    )


def _reserved_soon(job: Job, snap: Snapshot, before: float) -> str | None:
    """Why a running queued job must make way: a reservation on its GPUs begins soon."""
    for uuid in job.gpus:
        state = snap.gpus.get(uuid)
        if state is not None and state.free_until <= before:
            when = datetime.fromtimestamp(state.free_until, UTC)
            return f"{state.ref} is reserved from {when:%Y-%m-%d %H:%M:%S} UTC; back in the queue"
    return None


def _span(span: timedelta) -> str:
    """A duration as people write it: 90m -> 1h 30m."""
    minutes = round(span.total_seconds() / 60)
    if minutes < 1:
        return f"{round(span.total_seconds())}s"
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    return " ".join(parts)


def _cause(job: Job) -> str:
    for task in job.tasks:
        if task.last_error:
            return f"task {task.index}: {task.last_error}"
        if task.exit_status not in (None, 0):
            return f"task {task.index} exited with status {task.exit_status}"
    return f"the job {job.status}"
