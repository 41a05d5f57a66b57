"""Backfill with slots, placement per job, and estimates that hold: the pure admission pass.

Simulated time through the real `admit`: a small discrete-event loop runs the pass after
each submission and job end, as the Scheduler does after each sweep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from jupyter_gpuhive.jobs.admission import Candidate, GpuState, Slot, admit

NOW = 1_900_000_000.0
H = 3600.0


def cluster(*sizes: int, busy: dict[str, float] | None = None) -> dict[str, GpuState]:
    """Hosts h0, h1 … with these GPU counts; `busy`: GPU -> release of the job on it."""
    busy = busy or {}
    out = {}
    for h, size in enumerate(sizes):
        for i in range(size):
            uuid = f"h{h}-{i}"
            release = busy.get(uuid)
            blocker = None if release is None else f"h{h}:{i} runs job 99"
            out[uuid] = GpuState(uuid, f"h{h}", i, f"h{h}:{i}", blocker, release=release)
    return out


def count_job(job_id: int, n: int, hours: float = 1, *, created: float | None = None,
              now: float = NOW, same_host: str | None = None) -> Candidate:  # fmt: skip
    made = NOW + job_id if created is None else created
    return Candidate(job_id, "ann", made, now + hours * H, count=n, same_host=same_host)


def hosts_of(gpus: tuple[str, ...]) -> set[str]:
    return {u.split("-")[0] for u in gpus}


@dataclass
class Sim:
    """A cluster of `hosts` × `per_host` GPUs in simulated time, one pass per event."""

    hosts: int
    per_host: int
    depth: int = 32
    fifo: bool = False
    now: float = NOW
    running: dict[int, tuple[tuple[str, ...], float, float]] = field(default_factory=dict)
    pending: dict[int, tuple[int, float, float, float, str | None]] = field(default_factory=dict)
    plan: dict[int, Slot] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)
    placed: dict[int, tuple[str, ...]] = field(default_factory=dict)
    first_estimate: dict[int, float | None] = field(default_factory=dict)
    asked: dict[int, str | None] = field(default_factory=dict)

    def submit(self, job_id: int, n: int, walltime: float, runtime: float,
               same_host: str | None = None) -> None:  # fmt: skip
        self.pending[job_id] = (n, self.now, walltime, runtime, same_host)
        self.asked[job_id] = same_host

    def states(self) -> dict[str, GpuState]:
        held = {u: (j, end) for j, (gpus, end, _) in self.running.items() for u in gpus}
        out = {}
        for h in range(self.hosts):
            for i in range(self.per_host):
                uuid, ref = f"h{h}-{i}", f"h{h}:{i}"
                job = held.get(uuid)
                why = None if job is None else f"{ref} runs job {job[0]}"
                release = None if job is None else job[1]
                out[uuid] = GpuState(uuid, f"h{h}", i, ref, why, release=release)
        return out

    def step(self) -> dict[int, float | None]:
        """One pass now; the projected starts it gave."""
        cands = [
            Candidate(j, "ann", made, self.now + wall, count=n, same_host=placement)
            for j, (n, made, wall, _, placement) in self.pending.items()
        ]
        result = admit(cands, self.states(), self.now, previous=self.plan, depth=self.depth,
                       fifo=self.fifo)  # fmt: skip
        self.plan = result.planned
        for admission in result.admitted:
            _, _, wall, run, _ = self.pending.pop(admission.job_id)
            self.running[admission.job_id] = (admission.gpus, self.now + wall, self.now + run)
            self.started[admission.job_id] = self.now
            self.placed[admission.job_id] = admission.gpus
        return result.starts(self.now)

    def run_until(self, until: float, arrivals: list[tuple[float, int, int, float, float]]) -> None:
        """Events until `until`: arrivals (time, id, GPUs, walltime, runtime) and job ends;
        a pass after each, and at each slot's start (the Scheduler ticks every few seconds)."""
        arrivals = sorted(arrivals)
        while True:
            ends = [end for _, _, end in self.running.values()]
            dues = [s.start for s in self.plan.values() if s.start > self.now]
            times = [t for t in (arrivals[0][0] if arrivals else None, *ends, *dues) if t]
            if not times or min(times) > until:
                return
            self.now = min(times)
            for job_id, (_, _, end) in list(self.running.items()):
                if end <= self.now:
                    del self.running[job_id]
            while arrivals and arrivals[0][0] <= self.now:
                _, job_id, n, wall, run = arrivals.pop(0)
                self.submit(job_id, n, wall, run)
            for job_id, start in self.step().items():
                self.first_estimate.setdefault(job_id, start)


# --- no starvation ------------------------------------------------------------------------------


def stream(hosts: int, per_host: int, depth: int, fifo: bool = False) -> Sim:
    """A busy cluster, a job wanting every GPU, then a stream of 1-GPU jobs for two days
    (more than the cluster can run: the queue never empties)."""
    sim = Sim(hosts, per_host, depth=depth, fifo=fifo)
    rng = random.Random(3)
    for g in range(hosts * per_host):  # staggered running work: one GPU frees every 10 min
        sim.running[1000 + g] = ((f"h{g // per_host}-{g % per_host}",), NOW + (g + 1) * 600,
                                 NOW + (g + 1) * 600)  # fmt: skip
    sim.submit(1, hosts * per_host, 2 * H, 2 * H)  # the big one, count-only
    arrivals = []
    t = NOW
    for k in range(600):
        t += rng.uniform(60, 300)
        wall = rng.uniform(0.25, 2) * H
        arrivals.append((t, 2 + k, 1, wall, wall * rng.uniform(0.5, 1)))
    sim.step()
    sim.run_until(NOW + 48 * H, arrivals)
    return sim


def test_a_big_count_only_job_is_not_starved_by_a_stream_of_small_ones() -> None:
    # Before slots (greedy backfill, what depth 0 still does): every GPU that frees goes to
    # a small job, and the big job never starts.
    greedy = stream(2, 4, depth=0)
    assert 1 not in greedy.started
    # With its slot it starts once the work that ran when it came has ended (8 × 10 min),
    # as under strict FIFO, and no later than the start projected when it came.
    fair = stream(2, 4, depth=32)
    fifo = stream(2, 4, depth=32, fifo=True)
    assert fair.started[1] == fifo.started[1] == NOW + 80 * 60
    assert fair.first_estimate[1] == NOW + 80 * 60
    # Small jobs that end before it still ran first (backfill), and more of them than FIFO.
    assert any(fair.started[j] < fair.started[1] for j in fair.started if j != 1)
    assert len(fair.started) > len(fifo.started)


def test_no_job_holding_a_slot_is_pushed_back_by_later_submissions() -> None:
    gpus = cluster(4, busy={"h0-0": NOW + H, "h0-1": NOW + 2 * H})
    big = count_job(1, 4, hours=3)
    first = admit([big], gpus, NOW)
    assert first.planned[1].start == NOW + 2 * H
    # Later, shorter or longer jobs arrive; the slot stays where it was.
    later = [count_job(2, 1, hours=5), count_job(3, 2, hours=1), count_job(4, 2, hours=2)]
    again = admit([big, *later], gpus, NOW, previous=first.planned)
    assert again.planned[1] == first.planned[1]
    # Job 3 (2 GPUs, 1 h) ends before the slot begins: it backfills. Job 2 (5 h) would
    # run into the slot, and job 4 finds no two GPUs left: both come after the big job.
    assert [a.job_id for a in again.admitted] == [3]
    assert again.waiting[2] == "waiting for 1 free GPU on one host"
    assert again.planned[2].start == again.planned[4].start == NOW + 5 * H


# --- placement ---------------------------------------------------------------------------------


def test_required_never_splits_and_waits_for_a_whole_host() -> None:
    # Two 4-GPU hosts, two GPUs free on each: four free GPUs, but no host has four.
    gpus = cluster(4, 4, busy={"h0-0": NOW + H, "h0-1": NOW + H, "h1-0": NOW + 2 * H,
                               "h1-1": NOW + 2 * H})  # fmt: skip
    result = admit([count_job(1, 4)], gpus, NOW)
    assert result.admitted == []
    assert result.waiting[1] == "waiting for 4 free GPUs on one host"
    assert result.planned[1] == Slot(NOW + H, NOW + 2 * H, ("h0-0", "h0-1", "h0-2", "h0-3"))
    explicit = admit([count_job(1, 4, same_host="required")], gpus, NOW)
    assert explicit.planned == result.planned
    # Its slot keeps h0's free GPUs from then on: a 2-GPU job of 2 h goes to h1 instead.
    later = admit([count_job(1, 4), count_job(2, 2, hours=2)], gpus, NOW)
    assert {a.job_id: hosts_of(a.gpus) for a in later.admitted} == {2: {"h1"}}


def test_preferred_splits_only_when_no_host_can_take_it_now() -> None:
    gpus = cluster(4, 4, busy={"h0-0": NOW + H, "h0-1": NOW + H})
    one = admit([count_job(1, 2, same_host="preferred")], gpus, NOW)
    assert hosts_of(one.admitted[0].gpus) == {"h0"}  # where two fit most tightly
    whole = admit([count_job(1, 4, same_host="preferred")], gpus, NOW)
    assert hosts_of(whole.admitted[0].gpus) == {"h1"}
    # Six GPUs are free, no host has five: it splits, over as few hosts as possible.
    split = admit([count_job(1, 5, same_host="preferred")], gpus, NOW)
    assert len(split.admitted[0].gpus) == 5 and hosts_of(split.admitted[0].gpus) == {"h0", "h1"}
    assert sum(u.startswith("h1") for u in split.admitted[0].gpus) == 4
    # Bigger than any host: preferred by default, and it spans hosts.
    assert len(admit([count_job(1, 6)], gpus, NOW).admitted[0].gpus) == 6


def test_any_fills_the_fullest_hosts_first_and_keeps_whole_hosts_free() -> None:
    gpus = cluster(4, 4, 4, busy={"h0-0": NOW + H, "h0-1": NOW + H, "h0-2": NOW + H,
                                  "h1-0": NOW + H, "h1-1": NOW + H})  # fmt: skip
    packed = admit([count_job(1, 3, same_host="any")], gpus, NOW)
    assert hosts_of(packed.admitted[0].gpus) == {"h0", "h1"}  # h2 stays whole
    preferred = admit([count_job(1, 3, same_host="preferred")], gpus, NOW)
    assert hosts_of(preferred.admitted[0].gpus) == {"h2"}  # one host: the whole one


def test_a_required_job_bigger_than_every_host_waits_without_a_slot() -> None:
    result = admit([count_job(1, 6, same_host="required")], cluster(4, 4), NOW)
    assert result.waiting[1] == "no host has 6 GPUs (it asks for them on one host)"
    assert result.planned == {}


def test_strict_fifo_lets_nothing_pass_a_waiting_job() -> None:
    gpus = cluster(4, busy={"h0-0": NOW + H})
    jobs = [count_job(1, 4), count_job(2, 1)]
    fifo = admit(jobs, gpus, NOW, fifo=True)
    assert (
        fifo.admitted == [] and fifo.waiting[2] == "behind queued job 1 (first come, first served)"
    )
    backfill = admit(jobs, gpus, NOW)
    assert [a.job_id for a in backfill.admitted] == [2]


# --- estimates that hold ----------------------------------------------------------------------


def test_with_no_new_submissions_every_job_starts_no_later_than_estimated() -> None:
    rng = random.Random(11)
    for trial in range(20):
        sim = Sim(3, 4)
        for g in range(12):  # whatever runs now, with a walltime; it may end early
            wall = rng.uniform(0.2, 6) * H
            uuid = f"h{g // 4}-{g % 4}"
            sim.running[500 + g] = ((uuid,), NOW + wall, NOW + wall * rng.uniform(0.3, 1))
        for job_id in range(1, 25):
            n = rng.choice((1, 1, 2, 3, 4, 4, 6, 8, 12))
            wall = rng.uniform(0.2, 8) * H
            placement = rng.choice((None, None, "preferred", "any"))
            sim.submit(job_id, n, wall, wall * rng.uniform(0.2, 1), placement)
        estimates = sim.step()
        assert all(estimates[j] is not None for j in range(1, 25)), trial
        sim.run_until(NOW + 1000 * H, [])
        assert sorted(sim.started) == list(range(1, 25)), trial
        for job_id in range(1, 25):
            estimate = estimates[job_id]
            assert estimate is not None and sim.started[job_id] <= estimate + 1e-6, trial
            gpus = sim.placed[job_id]
            if len(gpus) <= 4 and sim.asked[job_id] is None:  # required: never split
                assert len(hosts_of(gpus)) == 1, (trial, job_id, gpus)


# --- the largest jobs wait no longer than under FIFO ---------------------------------------------


def early_end(fifo: bool, arrivals: list[tuple[float, int, int, float, float]],
              busy: dict[str, tuple[float, float]]) -> Sim:  # fmt: skip
    """Two 4-GPU hosts; `busy`: GPU -> (walltime end, real end) of the work running now;
    the jobs in `arrivals` come at once (as in `Sim.run_until`)."""
    sim = Sim(2, 4, fifo=fifo)
    for k, (uuid, (wall, real)) in enumerate(busy.items()):
        sim.running[900 + k] = ((uuid,), wall, real)
    for _, job_id, n, wall, run in arrivals:
        sim.submit(job_id, n, wall, run)
    sim.step()
    sim.run_until(NOW + 100 * H, [])
    return sim


def test_a_later_job_keeps_no_slot_in_front_of_a_wide_one() -> None:
    # The work on h0 may run 4 h, on h1 10 h; both end after 1 h. Job 1 wants all eight
    # GPUs for 5 h (its slot: at 10 h); job 2, later, four for 3 h. Before: job 2's slot
    # sat in the hole on h0 (4-7 h), so job 1 could not use the GPUs freed at 1 h, job 2
    # started then and job 1 only at 4 h. Now job 2's slot comes after job 1's.
    busy = {f"h{h}-{i}": (NOW + (4 if h == 0 else 10) * H, NOW + H) for h in (0, 1)
            for i in range(4)}  # fmt: skip
    jobs = [(NOW, 1, 8, 5 * H, 5 * H), (NOW, 2, 4, 3 * H, 3 * H)]
    first = admit([count_job(1, 8, 5), count_job(2, 4, 3)], cluster(4, 4, busy={
        u: wall for u, (wall, _) in busy.items()}), NOW)  # fmt: skip
    assert first.planned[1].start == NOW + 10 * H
    assert first.planned[2].start >= first.planned[1].start
    fair, fifo = early_end(False, jobs, busy), early_end(True, jobs, busy)
    assert fair.started[1] == fifo.started[1] == NOW + H
    assert fair.started[2] <= fair.first_estimate[2]  # type: ignore[operator]


def test_a_long_job_does_not_pass_a_waiting_wide_one() -> None:
    # One GPU runs work that may take 10 h and ends after 1 h. Job 1 wants all eight GPUs
    # for 2 h; job 2, later, one GPU for 6 h: it would end before job 1's slot (10 h), and
    # before it started then and held job 1 back until 6 h. Now it runs after job 1.
    busy = {"h0-0": (NOW + 10 * H, NOW + H)}
    jobs = [(NOW, 1, 8, 2 * H, 2 * H), (NOW, 2, 1, 6 * H, 6 * H)]
    fair, fifo = early_end(False, jobs, busy), early_end(True, jobs, busy)
    assert fair.started[1] == fifo.started[1] == NOW + H
    assert fair.started[2] == NOW + 3 * H
    # A short one (1 h, ending before job 1 could start at the earliest) still passes it.
    short = early_end(False, [*jobs[:1], (NOW, 2, 1, 0.5 * H, 0.5 * H)], busy)
    assert short.started[2] == NOW and short.started[1] == NOW + H


def test_a_waiting_job_takes_free_gpus_kept_for_a_later_one_that_can_move_up() -> None:
    # Jobs 1 and 2 want a host each for 3 h: job 1's slot is h0 from 1 h, job 2's h1 from
    # 2 h. h1 frees early, at 30 min: job 1 takes it now and job 2 moves to h0 from 1 h,
    # earlier than its slot. Before, job 2 passed job 1 on h1 and job 1 waited until 1 h.
    gpus = cluster(4, 4, busy={**{f"h0-{i}": NOW + H for i in range(4)},
                               **{f"h1-{i}": NOW + 2 * H for i in range(4)}})  # fmt: skip
    jobs = [count_job(1, 4, 3), count_job(2, 4, 3)]
    first = admit(jobs, gpus, NOW)
    assert hosts_of(first.planned[1].gpus) == {"h0"} and first.planned[1].start == NOW + H
    assert hosts_of(first.planned[2].gpus) == {"h1"} and first.planned[2].start == NOW + 2 * H
    later = NOW + 0.5 * H
    freed = cluster(4, 4, busy={f"h0-{i}": NOW + H for i in range(4)})
    moved = [count_job(1, 4, 3, now=later), count_job(2, 4, 3, now=later)]
    again = admit(moved, freed, later, previous=first.planned)
    assert [(a.job_id, hosts_of(a.gpus)) for a in again.admitted] == [(1, {"h1"})]
    assert again.planned[2] == Slot(NOW + H, NOW + 4 * H, tuple(f"h0-{i}" for i in range(4)))
