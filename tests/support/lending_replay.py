"""The preemption replay's model: a booked cluster whose holders leave part of their time
unused, a queue of checkpointing preemptible jobs, and their replay in simulated time through
the real admission and lending passes (`benchmarks/preemption.py` prints it, `tests/jobs`
checks it; its docstring describes the workload)."""

from __future__ import annotations

import heapq
import math
import random
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from jupyter_gpuhive.jobs.admission import RESERVATION_DEPTH, admit
from jupyter_gpuhive.jobs.plan import FOREVER, Candidate, GpuState, Slot
from jupyter_gpuhive.jobs.preemption import (
    PREEMPT_PATIENCE,
    Lending,
    PreemptionSettings,
    lending_states,
)
from jupyter_gpuhive.model import Gpu, Reservation
from tests.support.easy_backfill import easy_admit
from tests.support.queue_trace import HOUR, PER_HOST, TraceJob, make_trace, scaled

UTC = timezone.utc
GRACE_S = 30.0
CHECKPOINT_S = 600.0
MAX_PREEMPTIONS = 3
QUEUE_LOAD = 0.6
BLOCK = 4  # GPUs per booking block (two per host)
HORIZON_S = 14 * 24 * HOUR  # the Scheduler's horizon for slots
SETTINGS = PreemptionSettings(grace_s=int(GRACE_S), max_preemptions=MAX_PREEMPTIONS)


@dataclass
class Booking:
    """A reservation of one block and its holder's use of it."""

    res: Reservation
    uses: list[tuple[float, float]]  # when the holder wants to run: (from, to)
    lend: bool


@dataclass
class Work:
    """A checkpointing job: its trace entry, step and save times, and its progress."""

    trace: TraceJob
    step_s: float
    save_s: float
    done: float = 0.0  # seconds of work kept (the last checkpoint)
    restarts: int = 0


@dataclass
class Run:
    """One running job: since when, from which progress, on which GPUs, lent or not."""

    job: int
    since: float
    base: float
    gpus: tuple[str, ...]
    lent: bool
    stopping: bool = False


@dataclass
class Figures:
    useful_job_s: float = 0.0
    holder_s: float = 0.0
    saves_s: float = 0.0
    lost: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    finished: int = 0
    passes: int = 0
    pass_ms: list[float] = field(default_factory=list)
    borrowed_starts: int = 0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def workload(hosts: int, jobs: int, seed: int) -> tuple[list[Booking], list[Work], float]:
    """The bookings, the queue's jobs and the submission period."""
    rng = random.Random(seed)
    trace = [j for j in make_trace(jobs * 2, seed) if j.gpus <= PER_HOST][:jobs]
    trace = [replace(j, runtime=min(j.runtime, 12 * HOUR), walltime=min(j.walltime, 24 * HOUR))
             for j in trace]  # fmt: skip
    timed = scaled(trace, hosts * PER_HOST, QUEUE_LOAD, seed)
    period = timed[-1].submit
    work = [
        Work(j, min(120.0, max(0.5, rng.lognormvariate(math.log(5.0), 1.0))), rng.uniform(0.5, 5))
        for j in timed
    ]
    bookings: list[Booking] = []
    for host in range(hosts):
        for block in range(PER_HOST // BLOCK):
            gpus = tuple(
                Gpu(host * PER_HOST + i, f"node{host:03d}", i, uuid(host, i))
                for i in range(block * BLOCK, (block + 1) * BLOCK)
            )
            t = rng.uniform(0, 3) * HOUR
            while t < period:
                length = rng.uniform(2, 10) * HOUR
                res = Reservation(len(bookings) + 1, f"holder{len(bookings) % 7}", "", "",
                                  at(t), at(t + length), gpus, at(0))  # fmt: skip
                bookings.append(Booking(res, holder_uses(rng, t, length), rng.random() >= 0.1))
                t += length + rng.uniform(0.5, 3) * HOUR
    return bookings, work, period


def holder_uses(rng: random.Random, start: float, length: float) -> list[tuple[float, float]]:
    """When the holder runs: late, ending early, sometimes with a pause."""
    begin = start + length * rng.uniform(0, 0.4)
    end = start + length * (1 - rng.uniform(0, 0.1))
    if rng.random() < 0.4:
        pause = length * rng.uniform(0.05, 0.2)
        middle = begin + (end - begin - pause) * rng.uniform(0.3, 0.6)
        if middle > begin and middle + pause < end:
            return [(begin, middle), (middle + pause, end)]
    return [(begin, end)]


def uuid(host: int, index: int) -> str:
    return f"GPU-{host:03d}-{index}"


class Replay:
    """The discrete-event replay of one policy (lending on or off; `easy`: Slurm's EASY
    backfill over unbooked time instead of the pass, without lending, as a baseline)."""

    def __init__(
        self, bookings: list[Booking], work: list[Work], period: float, lend: bool,
        easy: bool = False,
    ):  # fmt: skip
        self.easy = easy and not lend
        self.bookings = bookings
        self.jobs = {w.trace.job_id: replace(w) for w in work}
        self.period = period
        self.lend = lend
        self.uuids = {g.uuid: (g.host, g.index) for b in bookings for g in b.res.gpus}
        self.by_res = {b.res.id: b for b in bookings}
        self.reserved: dict[str, list[tuple[float, float]]] = {}
        for b in bookings:
            for g in b.res.gpus:
                self.reserved.setdefault(g.uuid, []).append(
                    (b.res.start.timestamp(), b.res.end.timestamp())
                )
        self.lending = Lending(
            bookings=[b.res for b in bookings], choice={b.res.id: (b.lend, False) for b in bookings}
        )
        self.events: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.pending: dict[int, float] = {}  # job -> its place in the queue (submission)
        self.running: dict[int, Run] = {}
        self.version: dict[int, int] = {}
        self.occupant: dict[str, int] = {}
        self.holder_on: dict[str, int] = {}  # GPU -> booking whose holder runs on it
        self.waiting: dict[int, float] = {}  # booking -> when its holder asked
        self.plan: dict[int, Slot] = {}
        self.ticks: set[float] = set()
        self.out = Figures()

    def push(self, when: float, kind: str, ident: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, ident))

    def run(self) -> Figures:
        for w in self.jobs.values():
            self.push(w.trace.submit, "submit", w.trace.job_id)
        for b in self.bookings:
            for k, (low, high) in enumerate(b.uses):
                self.push(low, "holder", b.res.id * 8 + k)
                self.push(high, "holder-off", b.res.id * 8 + k)
        while self.events and self.events[0][0] <= self.period:
            now = self.events[0][0]
            while self.events and self.events[0][0] == now:
                _, _, kind, ident = heapq.heappop(self.events)
                self.handle(now, kind, ident)
            self.admission(now)
        for run in self.running.values():  # the period ends: count what was done by then
            if not run.stopping:
                self.out.useful_job_s += (self.period - run.since) * self.gpus(run.job)
        return self.out

    def gpus(self, job: int) -> int:
        return self.jobs[job].trace.gpus

    def handle(self, now: float, kind: str, ident: int) -> None:
        if kind == "submit":
            self.pending[ident] = self.jobs[ident].trace.submit
        elif kind == "finish":
            job, version = divmod(ident, 1000)
            run = self.running.get(job)
            if run is not None and self.version.get(job) == version and not run.stopping:
                self.out.useful_job_s += (now - run.since) * self.gpus(job)
                self.out.finished += 1
                self.release(job)
        elif kind == "stopped":
            self.release(ident)
            self.pending[ident] = self.jobs[ident].trace.submit
            self.holders_start(now)
        elif kind == "holder":
            self.holder_arrives(now, ident // 8)
        elif kind == "holder-off":  # the holder's GPU-seconds were counted when it started
            booking = ident // 8
            for g in self.by_res[booking].res.gpus:
                if self.holder_on.get(g.uuid) == booking:
                    del self.holder_on[g.uuid]
            self.waiting.pop(booking, None)

    def release(self, job: int) -> None:
        run = self.running.pop(job)
        for g in run.gpus:
            self.occupant.pop(g, None)

    def holder_arrives(self, now: float, booking: int) -> None:
        """The holder starts a process: reclaim lent GPUs, or start at once."""
        b = self.by_res[booking]
        for g in b.res.gpus:
            # Its process is on the GPU at once (sharing it with a job until the job stops):
            # the pass sees the GPU busy from now on.
            self.holder_on[g.uuid] = booking
            job = self.occupant.get(g.uuid)
            if job is not None and not self.running[job].stopping:
                self.preempt(now, job)
        self.waiting[booking] = now
        self.holders_start(now)

    def holders_start(self, now: float) -> None:
        """Holders whose GPUs no job holds any more run from now on (their wait ends)."""
        for booking, asked in list(self.waiting.items()):
            b = self.by_res[booking]
            if any(g.uuid in self.occupant for g in b.res.gpus):
                continue
            del self.waiting[booking]
            self.out.waits.append(now - asked)
            end = next(high for low, high in b.uses if low <= asked < high)
            self.out.holder_s += max(0.0, min(end, self.period) - now) * len(b.res.gpus)

    def preempt(self, now: float, job: int) -> None:
        """The signal: the job saves at its next step if that fits in the grace, else it is
        killed and keeps only its last periodic checkpoint."""
        run = self.running[job]
        run.stopping = True
        w = self.jobs[job]
        rng = random.Random(job * 7919 + w.restarts)
        step_left = rng.uniform(0, w.step_s)
        progress_now = run.base + (now - run.since)
        if step_left + w.save_s <= GRACE_S:
            stop = now + step_left + w.save_s
            kept, lost = progress_now + step_left, 0.0
            self.out.saves_s += w.save_s * w.trace.gpus
        else:
            stop = now + GRACE_S + PREEMPT_PATIENCE
            reached = progress_now + GRACE_S + PREEMPT_PATIENCE
            kept = max(run.base, math.floor(reached / CHECKPOINT_S) * CHECKPOINT_S)
            lost = reached - kept
        self.out.lost.append(lost)
        self.out.useful_job_s += (kept - run.base) * w.trace.gpus
        w.done = kept
        w.restarts += 1
        self.push(stop, "stopped", job)

    def states(self, now: float, reserved: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
        """The GPUs as `queue_inputs.gpu_states` gives them to the pass: busy with a job (until
        its walltime) or the holder's process, and free until the next booking."""
        out = {}
        for uuid_, (host, index) in self.uuids.items():
            ref = f"{host}:{index}"
            until = next((low for low, high in reserved.get(uuid_, ()) if high > now), FOREVER)
            job = self.occupant.get(uuid_)
            blocker, release = None, None
            if job is not None:
                blocker = f"{ref} runs job {job}"
                release = self.running[job].since + self.jobs[job].trace.walltime
            elif uuid_ in self.holder_on:
                blocker = f"{ref} runs a process of its holder"
            out[uuid_] = GpuState(uuid_, host, index, ref, blocker, until, release)
        return out

    def admission(self, now: float) -> None:
        if not self.pending:
            return
        reserved = {u: [s for s in spans if s[1] > now] for u, spans in self.reserved.items()}
        states = self.states(now, reserved)
        candidates = [
            Candidate(job, "u", created, now + self.jobs[job].trace.walltime,
                      count=self.gpus(job), same_host=self.jobs[job].trace.same_host)
            for job, created in self.pending.items()
        ]  # fmt: skip
        started = time.process_time()
        if self.easy:
            first = easy_admit(candidates, states, now, reserved)
        else:
            first = admit(candidates, states, now, reserved=reserved, previous=self.plan,
                          depth=RESERVATION_DEPTH, horizon=now + HORIZON_S)  # fmt: skip
        self.plan = dict(first.planned)
        admitted = [(a, False) for a in first.admitted]
        if self.lend:
            wanting = [c for c in candidates if c.job_id not in {a.job_id for a in first.admitted}
                       and self.jobs[c.job_id].restarts < MAX_PREEMPTIONS]  # fmt: skip
            if wanting:
                taken = [u for a in first.admitted for u in a.gpus]
                kept = [(s.start, s.end, s.gpus) for s in first.planned.values()]
                lent, spans = lending_states(states, reserved, self.lending, SETTINGS, now,
                                             taken, kept)  # fmt: skip
                second = admit(wanting, lent, now, reserved=spans, depth=0,
                               horizon=now + HORIZON_S)  # fmt: skip
                admitted += [(a, True) for a in second.admitted]
        self.out.pass_ms.append((time.process_time() - started) * 1000)
        self.out.passes += 1
        for admission, borrowed in admitted:
            self.start(now, admission.job_id, admission.gpus, borrowed)
        due = min((s.start for s in self.plan.values() if s.start > now), default=None)
        if due is not None and due not in self.ticks:
            self.ticks.add(due)
            self.push(due, "tick", 0)

    def start(self, now: float, job: int, gpus: tuple[str, ...], borrowed: bool) -> None:
        del self.pending[job]
        w = self.jobs[job]
        self.running[job] = Run(job, now, w.done, gpus, borrowed)
        self.version[job] = self.version.get(job, 0) + 1
        for g in gpus:
            self.occupant[g] = job
        self.out.borrowed_starts += borrowed
        remaining = w.trace.runtime - w.done
        self.push(now + remaining, "finish", job * 1000 + self.version[job])
