"""The admission pass's working state and plain inputs: GPUs now, jobs, slots (see `admission`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from .timeline import EPS, FOREVER, Line, earliest, earliest_on_one_host, pick


def placement(count: int, asked: str | None, largest_host: int) -> str:
    """The placement in force: what the job asked, else `required` when it fits one host."""
    if asked is not None:
        return asked
    return "required" if count <= largest_host else "preferred"


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
    # MiB a share job could still take on it (a shareable GPU that is free, or runs only
    # share jobs); None: not for share jobs (see packing.py)
    share_room: int | None = None


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
    attained: float = 0.0  # GPU-seconds it has run so far (preemptible jobs, after a preemption)
    requeued: float = 0.0  # when it went back to the queue after its last preemption (0: never)
    only: frozenset[str] | None = None  # count-only jobs naming a vendor or model: these GPUs
    memory: int | None = None  # a share job: the MiB of one shareable GPU it asks (packing.py)


class AccessCheck(Protocol):
    """The access rules as the pass asks them."""

    def restricted(self, owner: str) -> bool:
        """Whether rules apply to this owner at all (False: everything is allowed)."""
        ...

    def allows(self, owner: str, uuid: str, end: float) -> bool:
        """Whether the owner may use this GPU from now until `end`."""
        ...


@dataclass(frozen=True, slots=True)
class Slot:
    """Room the plan keeps for a waiting job: `gpus` from `start` to `end`."""

    start: float
    end: float
    gpus: tuple[str, ...]


def when(ts: float) -> str:
    """An instant as the waiting reasons show it."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


class Plan:
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
        # MiB left for share jobs on GPUs that run share jobs only (packing.py)
        self.rooms = {u: g.share_room for u, g in gpus.items()
                      if g.blocker is not None and g.share_room is not None}  # fmt: skip
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

    def holders(self, slot: Slot, job_id: int) -> set[int]:
        """The other queued jobs whose kept spans overlap `slot` on its GPUs."""
        found: set[int] = set()
        for uuid in slot.gpus:
            found |= self.line(uuid).owners_in(slot.start, slot.end)
        found.discard(job_id)
        return found

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
        largest = self.largest_for(job)
        policy = placement(job.count, job.same_host, largest)
        one = policy == "required"
        gpus = "1 free GPU" if job.count == 1 else f"{job.count} free GPUs"
        gpus += " of those it asks for" if job.only is not None else ""
        reason = f"waiting for {gpus}" + (" on one host" if one else "")
        if one and job.count > largest:
            return None, f"no host has {job.count} GPUs (it asks for them on one host)"
        key = job.owner if access is not None else ""
        if job.only is not None:
            failed = None  # what another job could not get says nothing of these GPUs
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
                if job.only is not None and gpu.uuid not in job.only:
                    continue
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

    def largest_for(self, job: Candidate) -> int:
        """The most GPUs one host has that the job may get (its vendor or model)."""
        if job.only is None:
            return self.largest
        sizes = Counter(self.gpus[u].host for u in job.only if u in self.gpus)
        return max(sizes.values(), default=0)

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
                return None, f"{gpu.ref} went to a job ahead of it in the queue"
            if gpu.blocker is not None:
                return None, gpu.blocker
            until = self.until[uuid]
            if until < job.end - EPS:
                owner = self.line(uuid).busy_from(self.now)[1] if uuid in self.lines else None
                if owner == job.job_id:
                    kept_for_it = True  # its own slot: the search says whether it may go now
                    continue
                if owner is not None:
                    return None, f"{gpu.ref} is kept for queued job {owner} from {when(until)}"
                return None, f"{gpu.ref} is reserved from {when(until)}"
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
        after: float = 0.0,
        passing: Collection[int] = (),
    ) -> Slot | None:
        """The earliest slot for a job that cannot start now, starting in [`after`, `before`)
        (None: none is known); the slots kept for the jobs in `passing` do not count."""
        start = max(self.now, job.not_before)
        length = job.end - start
        start = max(start, after)
        limit = min(self.horizon - length, before)
        if job.count:
            policy = placement(job.count, job.same_host, self.largest_for(job))
            one, need = policy == "required", job.count
            lines = self.all_lines()
            if job.only is not None:
                lines = [ln for ln in lines if ln.uuid in job.only]
        else:
            if any(u not in self.gpus for u in job.gpus):
                return None
            one, need, policy = False, len(job.gpus), "named"
            lines = [self.line(u) for u in job.gpus]
        for _ in range(8):  # each round drops the GPUs the access rules refuse
            search = earliest_on_one_host if one else earliest
            found = search(lines, need, start, length, limit, {job.job_id, *passing})
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
    "EPS",
    "FOREVER",
    "AccessCheck",
    "Candidate",
    "GpuState",
    "Plan",
    "Slot",
    "placement",
    "when",
]
