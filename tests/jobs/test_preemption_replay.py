"""The preemption replay (`benchmarks/preemption.py`) at its smoke size: what it measures holds."""

from __future__ import annotations

import pytest

from jupyter_gpuhive.jobs.preemption import PREEMPT_PATIENCE
from tests.support.lending_replay import CHECKPOINT_S, GRACE_S, Replay, workload


@pytest.fixture(scope="module")
def runs():  # type: ignore[no-untyped-def]
    bookings, work, period = workload(4, 150, seed=21)
    return bookings, period, {lend: Replay(bookings, work, period, lend).run() for lend in (0, 1)}


def test_the_workload_books_most_of_the_cluster_and_leaves_a_third_unused(runs) -> None:  # type: ignore[no-untyped-def]
    bookings, period, _ = runs
    booked = sum(
        (min(b.res.end.timestamp(), period) - b.res.start.timestamp()) * 4
        for b in bookings
        if b.res.start.timestamp() < period
    )
    used = sum((min(high, period) - low) * 4 for b in bookings for low, high in b.uses)
    assert 0.65 < booked / (32 * period) < 0.9
    assert 0.2 < 1 - used / booked < 0.4
    assert any(not b.lend for b in bookings) and any(b.lend for b in bookings)


def test_lending_adds_useful_work_and_the_holder_never_waits_past_the_grace(runs) -> None:  # type: ignore[no-untyped-def]
    _, _, out = runs
    without, with_ = out[0], out[1]
    assert without.borrowed_starts == 0 and not without.lost and max(without.waits) == 0
    assert with_.borrowed_starts > 0 and with_.lost  # jobs borrowed and were preempted
    assert max(with_.waits) <= GRACE_S + PREEMPT_PATIENCE + 1e-6
    assert max(with_.lost) <= CHECKPOINT_S
    # The holders do the same work either way; the jobs do more with lending.
    assert with_.holder_s == pytest.approx(without.holder_s, rel=0.01)
    assert with_.useful_job_s > 1.5 * without.useful_job_s


def test_easy_backfill_is_a_baseline_row_that_lending_beats() -> None:
    bookings, work, period = workload(4, 150, seed=21)
    easy = Replay(bookings, work, period, False, easy=True).run()
    plain = Replay(bookings, work, period, False).run()
    lent = Replay(bookings, work, period, True).run()
    assert easy.finished > 0 and easy.borrowed_starts == 0 and not easy.lost  # no lending
    assert easy.holder_s == plain.holder_s  # the holders keep their bookings under EASY too
    assert lent.holder_s + lent.useful_job_s > easy.holder_s + easy.useful_job_s
