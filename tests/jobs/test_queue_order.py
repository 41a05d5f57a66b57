"""The queue's order: smallest area first, aged by waiting time, with a bound that holds."""

from __future__ import annotations

import random

from jupyter_gpuhive.jobs.admission import Candidate, GpuState, admit
from jupyter_gpuhive.jobs.order import AGE_CAP, queue_order, standing
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
