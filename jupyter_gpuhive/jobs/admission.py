"""The queue's admission pass: pure functions over plain data (no store, no hosts, no clock).

Times are POSIX seconds. The Scheduler (`queue.py`) builds the inputs from the store and the
latest sweep; the benchmark builds them directly.

Rules of the pass:
- Candidates are tried first come, first served (created, then id). A job that cannot run now
  does not hold up later ones (backfill); a job that waited `drain_after` or longer and waits
  only for running work to end keeps the GPUs that are free meanwhile, so a stream of small
  jobs cannot starve a large one.
- Gang semantics: a job gets every GPU it needs at once, or none.
- A GPU is available when nothing runs on it (no task of any job, no foreign process), it is
  not taken earlier in this pass, and no reservation covers any of [now, job end).
- Count-only jobs get GPUs chosen here: all on one host when any host has enough (the host
  with the fewest that suffice), else on as few hosts as possible; within a host, the GPUs
  whose next reservation comes soonest while still after the job's end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

# The job option that asks for N GPUs chosen at admission instead of named ones.
GPU_COUNT = "gpu_count"
FOREVER = math.inf


def gpu_count(options: Mapping[str, Any]) -> int | None:
    """The GPU count a job asks for (`options["gpu_count"]`), or None when it names GPUs."""
    value = options.get(GPU_COUNT)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"'{GPU_COUNT}' must be a whole number of GPUs, at least 1")
    return value


def template_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A job's options without the queue's own (what its template validates)."""
    return {k: v for k, v in options.items() if k != GPU_COUNT}


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
    end: float  # the GPUs must be free of reservations until then (start + walltime)
    gpus: tuple[str, ...] = ()
    count: int = 0
    not_before: float = 0.0  # the job's start_at, for estimates


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


@dataclass
class PassResult:
    """The admitted jobs, in order, and why each other candidate waits."""

    admitted: list[Admission] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)  # GPUs kept free for a starving job


def admit(
    candidates: Iterable[Candidate],
    gpus: Mapping[str, GpuState],
    now: float,
    *,
    access: AccessCheck | None = None,
    drain_after: float | None = None,
) -> PassResult:
    """One admission pass: which candidates start now, on which GPUs (see the module doc)."""
    result = PassResult()
    claimed: set[str] = set()
    pool = _Pool(gpus.values())
    failed_counts: dict[str, dict[int, float]] = {}  # owner key -> count -> smallest failed end
    for job in sorted(candidates, key=lambda c: (c.created, c.job_id)):
        restricted = access is not None and access.restricted(job.owner)
        if job.count:
            key = job.owner if restricted else ""
            seen = failed_counts.setdefault(key, {})
            if any(n <= job.count and end <= job.end for n, end in seen.items()):
                result.waiting[job.job_id] = _NO_ROOM.format(n=job.count)
                continue
            chosen = pool.choose(job, access if restricted else None)
            if chosen is None:
                seen[job.count] = min(seen.get(job.count, FOREVER), job.end)
                result.waiting[job.job_id] = _NO_ROOM.format(n=job.count)
                continue
        else:
            reason = _fixed_problem(job, gpus, claimed, access if restricted else None)
            if reason is not None:
                result.waiting[job.job_id] = reason
                if drain_after is not None and now - job.created >= drain_after:
                    _hold(job, gpus, claimed, pool, result, access if restricted else None)
                continue
            chosen = [gpus[u] for u in job.gpus]
        claimed.update(g.uuid for g in chosen)
        pool.take(chosen)
        chosen.sort(key=lambda g: (g.host, g.index))
        result.admitted.append(Admission(job.job_id, tuple(g.uuid for g in chosen)))
    return result


_NO_ROOM = "waiting for {n} free GPU(s)"


def _fixed_problem(
    job: Candidate, gpus: Mapping[str, GpuState], claimed: set[str], access: AccessCheck | None
) -> str | None:
    """Why a job with named GPUs cannot start now (None: it can)."""
    if not job.gpus:
        return "the job has no GPUs"
    for uuid in job.gpus:
        gpu = gpus.get(uuid)
        if gpu is None:
            return f"GPU {uuid} is not known (or its host is not configured)"
        if uuid in claimed:
            return f"{gpu.ref} went to an earlier queued job"
        if gpu.blocker is not None:
            return gpu.blocker
        if gpu.free_until < job.end:
            return f"{gpu.ref} is reserved from {_when(gpu.free_until)}"
    if access is not None:
        for uuid in job.gpus:
            if not access.allows(job.owner, uuid, job.end):
                return f"the access rules do not let {job.owner} use {gpus[uuid].ref} until then"
    return None


def _hold(
    job: Candidate,
    gpus: Mapping[str, GpuState],
    claimed: set[str],
    pool: _Pool,
    result: PassResult,
    access: AccessCheck | None,
) -> None:
    """Keep a starving job's free GPUs for it, when it only waits for running work to end."""
    for uuid in job.gpus:
        gpu = gpus.get(uuid)
        if gpu is None or gpu.free_until < job.end or (gpu.blocker and gpu.release is None):
            return
        if access is not None and not access.allows(job.owner, uuid, job.end):
            return
    held = [gpus[u] for u in job.gpus if u not in claimed and gpus[u].blocker is None]
    claimed.update(g.uuid for g in held)
    pool.take(held)
    result.held.update({g.uuid: job.job_id for g in held})


class _Pool:
    """Free GPUs by host, each host's list sorted by next reservation, latest first."""

    def __init__(self, gpus: Iterable[GpuState]) -> None:
        by_host: dict[str, list[GpuState]] = {}
        for gpu in gpus:
            if gpu.blocker is None:
                by_host.setdefault(gpu.host, []).append(gpu)
        self.hosts = {
            host: sorted(found, key=lambda g: (-g.free_until, g.index))
            for host, found in sorted(by_host.items())
        }

    def take(self, chosen: Sequence[GpuState]) -> None:
        for gpu in chosen:
            found = self.hosts.get(gpu.host)
            if found is not None and gpu in found:
                found.remove(gpu)
                if not found:
                    del self.hosts[gpu.host]

    def choose(self, job: Candidate, access: AccessCheck | None) -> list[GpuState] | None:
        """`job.count` GPUs free until `job.end`: one host if possible, else fewest hosts."""
        end, need = job.end, job.count
        best: list[GpuState] | None = None
        spread: list[list[GpuState]] = []
        total = 0
        for found in self.hosts.values():
            usable: list[GpuState] = []
            for gpu in found:
                if gpu.free_until < end:
                    break  # sorted: the rest are reserved sooner still
                if access is None or access.allows(job.owner, gpu.uuid, end):
                    usable.append(gpu)
            if not usable:
                continue
            if len(usable) >= need:
                if best is None or len(usable) < len(best):
                    best = usable
                    if len(best) == need:
                        break
            elif best is None:
                spread.append(usable)
                total += len(usable)
        if best is not None:
            return best[len(best) - need :]  # those whose next reservation comes soonest
        if total < need:
            return None
        chosen: list[GpuState] = []
        for usable in sorted(spread, key=len, reverse=True):
            chosen += usable[max(0, len(usable) - (need - len(chosen))) :]
            if len(chosen) == need:
                break
        return chosen


# --- estimates ----------------------------------------------------------------------------


def earliest_fit(
    busy: Iterable[tuple[float, float]], start: float, length: float, horizon: float
) -> float | None:
    """The first time ≥ start from which `length` seconds avoid every busy span.

    None when that lies beyond `horizon` (the spans are only known until then).
    """
    t = start
    for low, high in sorted(busy):
        if high <= t:
            continue
        if low >= t + length:
            break
        t = high
    return t if t + length <= horizon else None


def estimates(
    jobs: Iterable[Candidate],
    gpus: Mapping[str, GpuState],
    reserved: Mapping[str, Sequence[tuple[float, float]]],
    now: float,
    horizon: float,
) -> dict[int, float | None]:
    """When each pending job could start: its GPUs free of reservations and of what runs there.

    Other queued jobs are not counted. None when unknown: something with no known end holds
    a GPU, or no slot opens before `horizon`. For count-only jobs the GPUs are looked at one
    by one (the `count`-th earliest start over all GPUs), an approximation.
    """

    def busy_of(uuid: str) -> list[tuple[float, float]] | None:
        gpu = gpus.get(uuid)
        if gpu is None:
            return None
        spans = list(reserved.get(uuid, ()))
        if gpu.blocker is not None:
            if gpu.release is None:
                return None
            spans.append((now, max(gpu.release, now + 1.0)))
        return spans

    busy = {uuid: busy_of(uuid) for uuid in gpus}
    per_gpu: dict[tuple[float, float], list[float]] = {}  # (start, length) -> sorted fits
    out: dict[int, float | None] = {}
    for job in jobs:
        start = max(now, job.not_before)
        length = job.end - start
        if job.count:
            fits = per_gpu.get((start, length))
            if fits is None:
                found = (
                    earliest_fit(spans, start, length, horizon)
                    for spans in busy.values()
                    if spans is not None
                )
                fits = per_gpu[(start, length)] = sorted(f for f in found if f is not None)
            out[job.job_id] = fits[job.count - 1] if len(fits) >= job.count else None
            continue
        spans_of = [busy.get(uuid) for uuid in job.gpus]
        if not spans_of or any(spans is None for spans in spans_of):
            out[job.job_id] = None
            continue
        merged = [span for spans in spans_of if spans is not None for span in spans]
        out[job.job_id] = earliest_fit(merged, start, length, horizon)
    return out


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


__all__ = [
    "GPU_COUNT",
    "AccessCheck",
    "Admission",
    "Candidate",
    "GpuState",
    "PassResult",
    "admit",
    "earliest_fit",
    "estimates",
    "gpu_count",
    "template_options",
]
