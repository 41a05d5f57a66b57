"""The EASY-backfill baseline on hand-made traces whose right EASY schedule is known."""

from __future__ import annotations

import pytest

from tests.support.queue_trace import HOUR, TraceJob, replay


def trace(*jobs: tuple[float, int, float]) -> list[TraceJob]:
    """Jobs (submitted at h, GPUs, runtime = walltime in h), ids from 1 in that order."""
    return [
        TraceJob(n, at * HOUR, gpus, hours * HOUR, hours * HOUR, None)
        for n, (at, gpus, hours) in enumerate(jobs, start=1)
    ]


def starts(jobs: list[TraceJob], policy: str) -> dict[int, float]:
    """Each job's start (h) when the trace is replayed on 2 hosts of 8 GPUs."""
    out = replay(jobs, 2, policy)
    return {j.job_id: round((j.submit + out.waits[j.job_id]) / HOUR, 3) for j in jobs}


def test_a_short_job_backfills_before_the_shadow_time() -> None:
    # 1 takes 6 GPUs of a host, 2 the other host; 3 (8 GPUs on one host) waits: its shadow
    # time is 10 h, when 1 ends, on 1's host. 4 (1 GPU, 5 h) ends before it: it starts now on
    # that host's 2 free GPUs; 5 (1 GPU, 20 h) would run past it on planned GPUs: it waits.
    jobs = trace((0, 6, 10), (0.1, 8, 10), (0.2, 8, 2), (0.3, 1, 5), (0.4, 1, 20))
    assert starts(jobs, "easy") == {1: 0, 2: 0.1, 3: 10, 4: 0.3, 5: 10.1}
    assert starts(jobs, "fifo") == {1: 0, 2: 0.1, 3: 10, 4: 10.1, 5: 10.1}


def test_a_long_job_starts_on_gpus_the_first_job_does_not_need() -> None:
    # 3 waits for one whole host: planned on the first at 10 h. 4 runs 30 h, far past that,
    # on 4 GPUs of the second host, which 3 does not need: it starts now. 5 (1 GPU) finds
    # nothing free until 2 ends.
    jobs = trace((0, 8, 10), (0.1, 4, 10), (0.2, 8, 1), (0.3, 4, 30), (0.4, 1, 1))
    assert starts(jobs, "easy") == {1: 0, 2: 0.1, 3: 10, 4: 0.3, 5: 10.1}
    assert starts(jobs, "fifo")[4] == 10  # strictly in order: after 3 starts


def test_only_the_first_waiting_job_gets_a_reservation() -> None:
    # 3 (8 GPUs) gets the first host at 10 h, when 1 ends; 4 (8 GPUs) waits too, without a
    # reservation; 5 (4 GPUs, 30 h) takes the second host's free GPUs, which 3 does not need,
    # though 4 could have had that host at 12.1 h: 4 starts at 15 h, when 3 ends.
    # Conservative backfill (gpuhive's pass) keeps a slot for 4 as well: 5 waits.
    jobs = trace((0, 8, 10), (0.1, 4, 12), (0.2, 8, 5), (0.3, 8, 5), (0.35, 4, 30))
    assert starts(jobs, "easy") == {1: 0, 2: 0.1, 3: 10, 4: 15, 5: 0.35}
    conservative = starts(jobs, "submission")
    assert conservative[4] == 12.1 and conservative[5] > 0.35


@pytest.mark.parametrize("policy", ["easy", "backfill"])
def test_whole_host_placement_holds(policy: str) -> None:
    # 2 GPUs free on each host: a job of 4 on one host waits for a host to free up
    jobs = trace((0, 6, 10), (0, 6, 10), (0.1, 4, 1))
    out = replay(jobs, 2, policy)
    assert out.hosts_used[3] == 1
    assert out.waits[3] == pytest.approx(9.9 * HOUR)
