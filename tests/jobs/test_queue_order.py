"""The queue's order: smallest area first, aged by waiting time, with a bound that holds."""

from __future__ import annotations

import random
from dataclasses import replace

from jupyter_gpuhive.jobs.admission import Candidate, GpuState, admit
from jupyter_gpuhive.jobs.order import AGE_CAP, queue_order, queue_time, standing
from jupyter_gpuhive.jobs.plan import Slot
from tests.support.queue_trace import PER_HOST, make_trace, replay, scaled

HOUR = 3600.0
NOW = 1_000_000.0


def job(job_id: int, created_h: float, gpus: int, hours: float) -> Candidate:
    created = NOW + created_h * HOUR
    return Candidate(job_id, "u", created, NOW + hours * HOUR, count=gpus)


def one_host(busy_until: float) -> dict[str, GpuState]:
    """One host of 8 GPUs, all running a job until `busy_until`."""
    return {
        f"g{i}": GpuState(f"g{i}", "h", i, f"h:{i}", "runs job 99", release=busy_until)
        for i in range(8)
    }


def test_a_small_job_goes_before_a_bigger_one_submitted_a_little_earlier() -> None:
    big, small = job(1, -2, 8, 24), job(2, -1, 1, 1)  # 192 GPU-hours, then 1
    assert [c.job_id for c in queue_order([big, small], NOW, 8)] == [2, 1]
    # the small one holds the first slot: it starts first once the host frees up
    result = admit([big, small], one_host(NOW + HOUR), NOW)
    assert result.planned[2].start == NOW + HOUR
    assert result.planned[1].start == NOW + 2 * HOUR


def test_no_job_is_ordered_behind_one_submitted_more_than_the_cap_after_it() -> None:
    rng = random.Random(4)
    jobs = [
        job(n, rng.uniform(-200, 0), rng.choice((1, 2, 4, 8, 16, 64)), rng.uniform(0.1, 72))
        for n in range(400)
    ]
    order = queue_order(jobs, NOW, 8)
    for place, later in enumerate(order):
        for earlier in order[place + 1 :]:  # ahead of `earlier` in the queue
            assert later.created <= earlier.created + AGE_CAP + 1e-6


def test_jobs_that_held_a_slot_stay_ahead() -> None:
    big, small = job(1, -2, 8, 24), job(2, -1, 1, 1)
    first = admit([big], one_host(NOW + HOUR), NOW)  # the big job alone gets the slot
    again = admit([big, small], one_host(NOW + HOUR), NOW, previous=first.planned)
    assert again.planned[1] == first.planned[1]  # kept, not given up to the small one
    assert list(again.waiting) == [1, 2]


def test_the_replay_finds_no_starved_job_on_a_busy_cluster() -> None:
    trace = scaled(make_trace(300, seed=7), 16 * PER_HOST, 0.85)
    out = replay(trace, 16, "backfill")
    assert len(out.waits) == len(trace)
    assert out.late == 0 and not out.passed


def test_each_waiting_job_shows_its_place_and_why() -> None:
    big, small = job(1, -2, 8, 24), job(2, -1, 1, 1)
    shown = standing(admit([big, small], one_host(NOW + HOUR), NOW).waiting)
    assert [shown[2]["place"], shown[1]["place"]] == [1, 2]  # the small one is next
    assert "8 free GPUs on one host" in shown[1]["waiting_for"]


def test_aging_bounds_a_big_jobs_wait_behind_a_stream_of_small_jobs() -> None:
    """One host of 8 GPUs; 1-GPU, 1-hour jobs arrive faster than it runs them (12 an hour),
    so small jobs always wait. An 8-GPU, 24-hour job (192 GPU-hours: queue time = created
    + 48 h) is passed by small jobs submitted up to 47 h after it (queue time: created +
    1 h), and by none submitted later: it starts once the small jobs ahead of it by queue
    time have started, then at its slot."""
    step, cap = 0.25 * HOUR, 8
    running: dict[str, float] = {}  # GPU -> when its job ends
    waiting: dict[int, Candidate] = {}
    started: dict[int, float] = {}
    planned: dict[int, Slot] = {}
    big_id, big_created = 0, NOW + 10 * HOUR
    now, next_id = NOW, 1
    while big_id not in started:
        assert now < big_created + 200 * HOUR, "the big job waits without bound"
        running = {g: end for g, end in running.items() if end > now}
        for _ in range(3):
            waiting[next_id] = Candidate(next_id, "u", now, now + HOUR, count=1)
            next_id += 1
        if now == big_created:
            waiting[big_id] = Candidate(big_id, "v", now, now + 24 * HOUR, count=cap)
        gpus = {
            f"g{i}": GpuState(f"g{i}", "h", i, f"h:{i}", busy, release=running.get(f"g{i}"))
            for i in range(cap)
            for busy in ["runs a job" if f"g{i}" in running else None]
        }
        cands = [replace(c, end=now + (c.end - c.created)) for c in waiting.values()]
        result = admit(cands, gpus, now, previous=planned)
        planned = result.planned
        for a in result.admitted:
            job = waiting.pop(a.job_id)
            started[a.job_id] = now
            running.update({g: now + (job.end - job.created) for g in a.gpus})
        now += step

    big_queue_time = queue_time(Candidate(0, "v", big_created, big_created + 24 * HOUR,
                                          count=cap), big_created, cap)  # fmt: skip
    assert big_queue_time == big_created + AGE_CAP
    small = {n: NOW + (n - 1) // 3 * step for n in started if n != big_id}  # submitted
    before = [n for n in small if started[n] < started[big_id]]
    # small jobs submitted after the big one did pass it (smallest area first) ...
    assert any(small[n] > big_created for n in before)
    # ... but only those whose queue time (created + 1 h) is before the big job's
    assert all(small[n] + HOUR <= big_queue_time for n in before)
    assert all(started[n] > started[big_id] for n in small if small[n] + HOUR > big_queue_time)
    # it starts once those have, as soon as the GPUs they took are free again
    assert started[big_id] <= max(started[n] for n in before) + HOUR + step
