"""The queue's admission pass: pure functions over plain data (no store, no hosts, no clock).

Times are POSIX seconds. The Scheduler (`queue.py`) builds the inputs from the store and the
latest sweep; the benchmarks build them directly.

The pass is conservative backfill. Pending jobs are taken first come, first served (created,
then id). Each job starts now if GPUs for it are free now until its end (start + walltime):
free of running work, of bookings and planned runs, and of every slot the plan keeps for
other queued jobs. A job that cannot start now gets a *slot*: the earliest time at which
GPUs for it are free for its whole walltime, given the running jobs' walltimes (their
expected release), bookings and the slots of the jobs before it, and keeps those GPUs from
then on. Later jobs start now only where they end before every kept slot begins (backfill),
so they never delay a job that holds a slot. The first `depth` waiting jobs get slots; the
rest may only backfill until they move up. The slot's start is the job's projected start.

Slots persist: the Scheduler hands the last pass's slots back in (`previous`). Each one is
kept while it still fits, and a job's new slot is searched with the others' slots in place,
so it is never later than its old one (conservative backfill with compression).

The guarantee: a job that holds a slot starts no later than that slot's start; its projected
start only moves earlier, whatever is submitted after it. This holds while the inputs keep
their promises: running jobs end by their walltime (the Scheduler stops them then), and no
new booking, foreign process, unreachable host or access rule change takes the slot's GPUs
(then the slot is searched again). A job beyond the first `depth` waits at most until the
jobs ahead of it start, then holds a slot. No job starves, count-only or gang.

Placement:
- Gang semantics: a job gets every GPU it needs at once, or none.
- Named GPUs: exactly those. Count-only jobs get GPUs chosen here, by `same_host`:
  `required` (the default when the count fits on the largest host): all on one host, the
  host where they fit most tightly; it waits for a host rather than being split.
  `preferred` (the default for larger jobs): one host if one can take it, else as few hosts
  as possible. `any`: one host if one can take it, else the fullest hosts first, so whole
  hosts stay free for `required` jobs. Within a host, the GPUs whose next booking comes
  soonest while still after the job's end.
- Access rules: a restricted owner's job only gets GPUs the owner may use until its end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from .timeline import EPS, FOREVER, Line, earliest, earliest_on_one_host, pick

# The job options that ask for N GPUs chosen at admission, and where they may be.
GPU_COUNT = "gpu_count"
SAME_HOST = "same_host"
PLACEMENTS = ("required", "preferred", "any")
RESERVATION_DEPTH = 32  # waiting jobs that hold a slot in each pass


def gpu_count(options: Mapping[str, Any]) -> int | None:
    """The GPU count a job asks for (`options["gpu_count"]`), or None when it names GPUs."""
    value = options.get(GPU_COUNT)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"'{GPU_COUNT}' must be a whole number of GPUs, at least 1")
    return value


def same_host(options: Mapping[str, Any]) -> str | None:
    """The placement a job asks for (`options["same_host"]`), or None for the default."""
    value = options.get(SAME_HOST)
    if value is None:
        return None
    if value not in PLACEMENTS:
        raise ValueError(f"'{SAME_HOST}' must be one of {', '.join(PLACEMENTS)}")
    return str(value)


def placement(count: int, asked: str | None, largest_host: int) -> str:
    """The placement in force: what the job asked, else `required` when it fits one host."""
    if asked is not None:
        return asked
    return "required" if count <= largest_host else "preferred"


def template_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A job's options without the queue's own (what its template validates)."""
    return {k: v for k, v in options.items() if k not in (GPU_COUNT, SAME_HOST)}


@dataclass(frozen=True, slots=True)
class GpuState:
    """What the pass knows of one GPU right now."""

    uuid: str
    host: str
    index: int
    ref: str
    blocker: str | None = None  # why it is busy now (a running task, a foreign process …)
    free_until: float = FOREVER  # start of the next reservation (now or earlier: reserved now)
    release: float | None = None  # when the blocker is expected to go; None: unknown


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pending queued job: named GPUs (`gpus`) or a count chosen at admission (`count`)."""

    job_id: int
    owner: str
    created: float
    end: float  # the GPUs must be free until then: max(now, not_before) + walltime
    gpus: tuple[str, ...] = ()
    count: int = 0
    not_before: float = 0.0  # the job's start_at
    same_host: str | None = None  # for count-only jobs; None: the default


class AccessCheck(Protocol):
    """The access rules as the pass asks them."""

    def restricted(self, owner: str) -> bool:
        """Whether rules apply to this owner at all (False: everything is allowed)."""
        ...

    def allows(self, owner: str, uuid: str, end: float) -> bool:
        """Whether the owner may use this GPU from now until `end`."""
        ...


@dataclass(frozen=True, slots=True)
class Admission:
    """A job admitted by the pass and the GPUs it claimed (host, then index order)."""

    job_id: int
    gpus: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Slot:
    """Room the plan keeps for a waiting job: `gpus` from `start` to `end`."""

    start: float
    end: float
    gpus: tuple[str, ...]


@dataclass
class PassResult:
    """The admitted jobs, in order, why each other candidate waits, and the kept slots."""

    admitted: list[Admission] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    planned: dict[int, Slot] = field(default_factory=dict)

    def starts(self, now: float) -> dict[int, float | None]:
        """Each candidate's projected start: now, its slot's start, or None (unknown)."""
        out: dict[int, float | None] = {a.job_id: now for a in self.admitted}
        for job_id in self.waiting:
            slot = self.planned.get(job_id)
            out[job_id] = slot.start if slot is not None else None
        return out


def admit(
    candidates: Iterable[Candidate],
    gpus: Mapping[str, GpuState],
    now: float,
    *,
    access: AccessCheck | None = None,
    reserved: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    previous: Mapping[int, Slot] | None = None,
    depth: int = RESERVATION_DEPTH,
    horizon: float = FOREVER,
    fifo: bool = False,
) -> PassResult:
    """One pass: which candidates start now, on which GPUs, and the slots kept for the
    others (see the module doc). `reserved`: each GPU's booked spans (without it, a GPU
    counts as booked from its `free_until` on); `horizon`: no slot ends after it.
    `fifo`: strict first come, first served (nothing passes a waiting job), for comparison.
    """
    jobs = sorted(candidates, key=lambda c: (c.created, c.job_id))
    plan = _Plan(gpus, now, reserved, horizon)
    result = PassResult()
    if previous and not fifo:
        for job in jobs:
            slot = previous.get(job.job_id)
            if slot is not None:
                plan.load(job, slot)
    failed: dict[tuple[str, bool], dict[int, float]] = {}  # (owner key, one host) -> n -> end
    ahead: int | None = None
    for job in jobs:
        if ahead is not None:
            result.waiting[job.job_id] = f"behind queued job {ahead} (first come, first served)"
            continue
        check = access if access is not None and access.restricted(job.owner) else None
        had = plan.slots.get(job.job_id)
        ready = job.not_before <= now
        deep = len(result.waiting) >= depth  # only the first `depth` waiting jobs hold slots
        if not ready:
            chosen, reason = None, f"it starts no earlier than {_when(job.not_before)}"
        elif job.count:
            chosen, reason = plan.count_now(job, check, None if had else failed)
        else:
            chosen, reason = plan.named_now(job, check)
        slot = had
        if deep and had is not None:
            plan.release(job.job_id)
            failed.clear()
            slot = had = None
        if chosen is None and not fifo:
            if had is not None:  # only an earlier slot replaces it: never a later one
                slot = plan.search(job, check, before=had.start) or had
            elif not deep:
                slot = plan.search(job, check)
            if slot is not None and ready and slot.start <= now:
                chosen = plan.free_now(job, slot.gpus, check)
        if had is not None and slot is not had:
            plan.release(job.job_id)
            failed.clear()  # its old slot is free again for the jobs after it
        if chosen is not None:
            plan.release(job.job_id)
            plan.claim(job, chosen)
            chosen.sort(key=lambda g: (g.host, g.index))
            result.admitted.append(Admission(job.job_id, tuple(g.uuid for g in chosen)))
            continue
        result.waiting[job.job_id] = reason
        if fifo:
            ahead = job.job_id
        elif slot is not None:
            if slot is not had:
                plan.keep(job.job_id, slot)
            result.planned[job.job_id] = slot
    return result


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


class _Plan:
    """The pass's working state: GPUs free now (by host), timelines, slots and claims."""

    def __init__(
        self,
        gpus: Mapping[str, GpuState],
        now: float,
        reserved: Mapping[str, Sequence[tuple[float, float]]] | None,
        horizon: float,
    ) -> None:
        self.gpus, self.now, self.reserved, self.horizon = gpus, now, reserved, horizon
        self.lines: dict[str, Line] = {}
        self.claimed: set[str] = set()
        self.slots: dict[int, Slot] = {}
        self.until = {u: g.free_until for u, g in gpus.items() if g.blocker is None}
        self.free: dict[str, list[GpuState]] = {}  # host -> free GPUs, latest `until` first
        sizes: dict[str, int] = {}
        for gpu in gpus.values():
            sizes[gpu.host] = sizes.get(gpu.host, 0) + 1
            if gpu.blocker is None:
                self.free.setdefault(gpu.host, []).append(gpu)
        self.sizes = sizes
        self.largest = max(sizes.values(), default=0)
        self.free = dict(sorted(self.free.items()))
        for host in self.free:
            self._sort(host)
        self._all: list[Line] | None = None

    # --- timelines and slots ------------------------------------------------------------

    def free_now(
        self, job: Candidate, uuids: Sequence[str], access: AccessCheck | None
    ) -> list[GpuState] | None:
        """The GPUs of a slot that is due, if each is free now."""
        chosen = [self.gpus[u] for u in uuids]
        for gpu in chosen:
            if gpu.blocker is not None or gpu.uuid in self.claimed:
                return None
            if access is not None and not access.allows(job.owner, gpu.uuid, job.end):
                return None
        return chosen

    def line(self, uuid: str) -> Line:
        found = self.lines.get(uuid)
        if found is None:
            gpu = self.gpus[uuid]
            if gpu.blocker is None:
                avail = self.now
            elif gpu.release is None:
                avail = FOREVER
            else:  # any moment when overdue, but not now: it is still busy
                avail = max(gpu.release, self.now + 1.0)
            if self.reserved is not None:
                spans: Iterable[tuple[float, float]] = self.reserved.get(uuid, ())
            else:
                spans = [(gpu.free_until, FOREVER)] if gpu.free_until < FOREVER else []
            found = self.lines[uuid] = Line(uuid, gpu.host, gpu.index, avail, spans)
        return found

    def all_lines(self) -> list[Line]:
        if self._all is None:
            lines = (self.line(u) for u in self.gpus)
            self._all = [line for line in lines if line.avail < FOREVER]
        return self._all

    def load(self, job: Candidate, slot: Slot) -> None:
        """Keep a slot from the last pass when it still fits (moved up to now if due)."""
        length = job.end - max(self.now, job.not_before)
        start = max(slot.start, self.now, job.not_before)
        if not slot.gpus or any(u not in self.gpus for u in slot.gpus):
            return
        end = start + length
        if start == slot.start and abs(slot.end - end) < 1e-3:
            end = slot.end  # the same slot exactly, not one with float noise at its end
        lines = [self.line(u) for u in slot.gpus]
        if end <= self.horizon and all(ln.free(start, end) for ln in lines):
            self.keep(job.job_id, Slot(start, end, slot.gpus))

    def keep(self, job_id: int, slot: Slot) -> None:
        self.slots[job_id] = slot
        hosts = set()
        for uuid in slot.gpus:
            self.line(uuid).keep(slot.start, slot.end, job_id)
            if uuid in self.until and slot.start < self.until[uuid]:
                self.until[uuid] = slot.start
                hosts.add(self.gpus[uuid].host)
        for host in hosts:
            self._sort(host)

    def release(self, job_id: int) -> Slot | None:
        """Drop a job's own slot before it is placed again; the slot it had."""
        slot = self.slots.pop(job_id, None)
        if slot is not None:
            hosts = set()
            for uuid in slot.gpus:
                line = self.line(uuid)
                line.release(job_id)
                if uuid in self.until:
                    self.until[uuid] = line.busy_from(self.now)[0]
                    hosts.add(self.gpus[uuid].host)
            for host in hosts:
                self._sort(host)
        return slot

    def claim(self, job: Candidate, chosen: Sequence[GpuState]) -> None:
        """The job starts now on these GPUs: busy until its end."""
        for gpu in chosen:
            self.claimed.add(gpu.uuid)
            self.line(gpu.uuid).avail = job.end
            found = self.free.get(gpu.host)
            if found is not None and gpu in found:
                found.remove(gpu)

    def _sort(self, host: str) -> None:
        found = self.free.get(host)
        if found:
            found.sort(key=lambda g: (-self.until[g.uuid], g.index))

    # --- starting now -------------------------------------------------------------------

    def count_now(
        self,
        job: Candidate,
        access: AccessCheck | None,
        failed: dict[tuple[str, bool], dict[int, float]] | None,
    ) -> tuple[list[GpuState] | None, str]:
        """GPUs free now for a count-only job, or why it waits."""
        policy = placement(job.count, job.same_host, self.largest)
        one = policy == "required"
        reason = f"waiting for {job.count} free GPU(s)" + (" on one host" if one else "")
        if one and job.count > self.largest:
            return None, f"no host has {job.count} GPUs (it asks for them on one host)"
        key = job.owner if access is not None else ""
        if failed is not None:
            for scope in ((key, True), (key, False)) if one else ((key, False),):
                seen = failed.get(scope, {})
                if any(n <= job.count and end <= job.end for n, end in seen.items()):
                    return None, reason
        chosen = self._choose(job, access, one, pack=policy == "any")
        if chosen is None:
            if failed is not None:
                seen = failed.setdefault((key, one), {})
                seen[job.count] = min(seen.get(job.count, FOREVER), job.end)
            return None, reason
        return chosen, reason

    def _choose(
        self, job: Candidate, access: AccessCheck | None, one: bool, pack: bool
    ) -> list[GpuState] | None:
        end, need = job.end, job.count
        best: list[GpuState] | None = None
        spread: list[list[GpuState]] = []
        total = 0
        partial: list[list[GpuState]] = []  # for `pack`: usable GPUs of hosts in use
        for found in self.free.values():
            usable: list[GpuState] = []
            for gpu in found:
                if self.until[gpu.uuid] < end - EPS:
                    break  # sorted: the rest are taken sooner still
                if access is None or access.allows(job.owner, gpu.uuid, end):
                    usable.append(gpu)
            if pack and usable and len(usable) < self.sizes[usable[0].host]:
                partial.append(usable)
            if len(usable) >= need and not pack:
                if best is None or len(usable) < len(best):
                    best = usable
                    if len(best) == need:
                        break
            elif usable and best is None and not one:
                spread.append(usable)
                total += len(usable)
        if pack and sum(len(usable) for usable in partial) >= need:
            spread, total = partial, need  # hosts already in use, not a wholly free one
            fits = [usable for usable in partial if len(usable) >= need]
            best = min(fits, key=len) if fits else None
        elif pack:
            fits = [usable for usable in spread if len(usable) >= need]
            best = min(fits, key=len) if fits else None
        if best is not None:
            return best[len(best) - need :]  # those taken again soonest after its end
        if one or total < need:
            return None
        chosen: list[GpuState] = []
        spread.sort(key=lambda usable: (len(usable), usable[0].host), reverse=not pack)
        for usable in spread:
            chosen += usable[max(0, len(usable) - (need - len(chosen))) :]
            if len(chosen) == need:
                break
        return chosen

    def named_now(
        self, job: Candidate, access: AccessCheck | None
    ) -> tuple[list[GpuState] | None, str]:
        """The named GPUs if they are all free now until the job's end, or why it waits."""
        if not job.gpus:
            return None, "the job has no GPUs"
        kept_for_it = False
        for uuid in job.gpus:
            gpu = self.gpus.get(uuid)
            if gpu is None:
                return None, f"GPU {uuid} is not known (or its host is not configured)"
            if uuid in self.claimed:
                return None, f"{gpu.ref} went to an earlier queued job"
            if gpu.blocker is not None:
                return None, gpu.blocker
            until = self.until[uuid]
            if until < job.end - EPS:
                owner = self.line(uuid).busy_from(self.now)[1] if uuid in self.lines else None
                if owner == job.job_id:
                    kept_for_it = True  # its own slot: the search says whether it may go now
                    continue
                if owner is not None:
                    return None, f"{gpu.ref} is kept for queued job {owner} from {_when(until)}"
                return None, f"{gpu.ref} is reserved from {_when(until)}"
        if access is not None:
            for uuid in job.gpus:
                if not access.allows(job.owner, uuid, job.end):
                    ref = self.gpus[uuid].ref
                    return None, f"the access rules do not let {job.owner} use {ref} until then"
        if kept_for_it:
            return None, "waiting for the GPUs kept for it"
        return [self.gpus[u] for u in job.gpus], ""

    # --- a slot later -------------------------------------------------------------------

    def search(
        self,
        job: Candidate,
        access: AccessCheck | None,
        before: float = FOREVER,
    ) -> Slot | None:
        """The earliest slot for a job that cannot start now, starting before `before`
        (None: none is known)."""
        start = max(self.now, job.not_before)
        length = job.end - start
        limit = min(self.horizon - length, before)
        if job.count:
            policy = placement(job.count, job.same_host, self.largest)
            one, need = policy == "required", job.count
            lines = self.all_lines()
        else:
            if any(u not in self.gpus for u in job.gpus):
                return None
            one, need, policy = False, len(job.gpus), "named"
            lines = [self.line(u) for u in job.gpus]
        for _ in range(8):  # each round drops the GPUs the access rules refuse
            search = earliest_on_one_host if one else earliest
            found = search(lines, need, start, length, limit, job.job_id)
            if found is None:
                return None
            at, fitting = found
            refused = (
                {ln.uuid for ln in fitting if not access.allows(job.owner, ln.uuid, at + length)}
                if access is not None
                else set()
            )
            fitting = [ln for ln in fitting if ln.uuid not in refused]
            chosen = fitting if policy == "named" else []
            if policy != "named":
                chosen = pick(fitting, need, at, at + length, one, pack=policy == "any")
            if len(chosen) == need:
                return Slot(at, at + length, tuple(ln.uuid for ln in chosen))
            if not refused:
                return None
            lines = [ln for ln in lines if ln.uuid not in refused]
        return None


__all__ = [
    "GPU_COUNT",
    "PLACEMENTS",
    "RESERVATION_DEPTH",
    "SAME_HOST",
    "AccessCheck",
    "Admission",
    "Candidate",
    "GpuState",
    "PassResult",
    "Slot",
    "admit",
    "gpu_count",
    "placement",
    "same_host",
    "template_options",
]
