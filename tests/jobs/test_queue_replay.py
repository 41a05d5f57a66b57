"""The trace-replay benchmark on a small trace: what it measures holds, and its last line's keys."""

from __future__ import annotations

import itertools
import statistics

import pytest

from tests.support.queue_trace import (
    PER_HOST,
    compare,
    make_trace,
    placement,
    replay,
    scaled,
    summary,
    timed,
)


def test_the_trace_looks_like_a_production_one() -> None:
    trace = timed(make_trace(2000, seed=5), per_hour=30, seed=5)
    sizes = [j.gpus for j in trace]
    assert 0.45 < sizes.count(1) / len(sizes) < 0.6  # most jobs are small
    assert sum(n >= 16 for n in sizes) / len(sizes) > 0.04  # a long tail of big ones
    assert max(sizes) == 128
    runtimes = sorted(j.runtime for j in trace)
    assert runtimes[len(runtimes) // 2] < 3600 < 86400 < runtimes[-1]  # minutes to days
    assert all(j.runtime <= j.walltime <= 3.75 * j.runtime + 300 for j in trace)  # overstated
    gaps = [b.submit - a.submit for a, b in itertools.pairwise(trace)]
    assert statistics.pstdev(gaps) > 2 * statistics.fmean(gaps)  # bursty, not Poisson
    by_hour = [0] * 24
    for job in trace:
        by_hour[int(job.submit // 3600) % 24] += 1
    assert max(by_hour) > 2 * min(by_hour)  # a daily cycle


@pytest.mark.parametrize("load", [0.85, 1.15])
def test_backfill_keeps_its_promises_on_a_busy_cluster(load: float) -> None:
    trace = scaled(make_trace(300, seed=7), 16 * PER_HOST, load)
    by_id = {j.job_id: j for j in trace}
    backfill = replay(trace, 16, "backfill")
    fifo = replay(trace, 16, "fifo")
    assert len(backfill.waits) == len(fifo.waits) == len(trace)  # everyone ran
    assert backfill.late == 0  # no job started after the first start projected for it
    for job_id, hosts in backfill.hosts_used.items():
        job = by_id[job_id]
        if placement(job.gpus, job.same_host, PER_HOST) == "required":
            assert hosts == 1, job
    figures = summary(trace, backfill, 16 * PER_HOST)
    assert figures["split_required_jobs"] == 0
    assert figures["mean_wait_h"] < summary(trace, fifo, 16 * PER_HOST)["mean_wait_h"]


def test_the_last_line_has_exactly_the_figures_asked_for() -> None:
    final = compare(make_trace(150, seed=3), 16, policies=("backfill", "fifo"))
    assert set(final) == {"mean_wait_ratio_vs_fifo", "max_wait_ratio_vs_fifo_largest_class",
                          "util_ratio_vs_fifo", "split_required_jobs", "admit_p99_ms"}  # fmt: skip
    assert final["split_required_jobs"] == 0 and final["admit_p99_ms"] > 0
