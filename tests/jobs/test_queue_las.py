"""Least attained service for preemptible jobs: who may be preempted, the bound per job, and the
replay that models the grace and the work lost since the last checkpoint."""

from __future__ import annotations

from jupyter_gpuhive.jobs.attained import Runner, victims
from jupyter_gpuhive.jobs.order import LEVELS_GPU_H, PROMOTE_AFTER, level, queue_order
from jupyter_gpuhive.jobs.plan import Candidate
from tests.support.las_replay import CHECKPOINT_S, GRACE_S, MAX_PREEMPTIONS
from tests.support.queue_trace import PER_HOST, make_trace, replay, scaled, summary

HOUR = 3600.0
NOW = 1_000_000.0
SERVED = 2 * LEVELS_GPU_H[0] * HOUR  # GPU-seconds: past the first level


def new(job_id: int = 1, gpus: int = 2, hours: float = 1.0) -> Candidate:
    return Candidate(job_id, "u", NOW - 60, NOW + hours * HOUR, count=gpus)


def runner(job_id: int, gpus: tuple[str, ...], attained: float = SERVED, n: int = 0) -> Runner:
    return Runner(job_id, "h", gpus, attained, n)


def test_a_new_short_job_preempts_the_most_served_job_it_needs() -> None:
    runners = [runner(7, ("g0",), SERVED), runner(8, ("g1", "g2"), 3 * SERVED)]
    found = victims(new(gpus=2), NOW, GRACE_S, {"h": ["g3"]}, {}, runners, MAX_PREEMPTIONS)
    assert found is not None and found.victims == (8,) and found.gpus == ("g1", "g2")
    # one more GPU free: the least preempted GPUs (one, of job 7) are enough
    found = victims(new(gpus=2), NOW, GRACE_S, {"h": ["g3"]}, {}, runners[:1], MAX_PREEMPTIONS)
    assert found is not None and found.victims == (7,) and found.gpus == ("g0", "g3")


def test_the_bound_a_new_job_and_the_kept_slots_protect_a_running_job() -> None:
    served = [runner(8, ("g1", "g2"), SERVED)]
    assert victims(new(), NOW, GRACE_S, {}, {}, served, MAX_PREEMPTIONS) is not None
    worn = [runner(8, ("g1", "g2"), SERVED, n=MAX_PREEMPTIONS)]
    assert victims(new(), NOW, GRACE_S, {}, {}, worn, MAX_PREEMPTIONS) is None
    fresh = [runner(8, ("g1", "g2"), 0.5 * LEVELS_GPU_H[0] * HOUR)]  # level 0: not preempted
    assert victims(new(), NOW, GRACE_S, {}, {}, fresh, MAX_PREEMPTIONS) is None
    slot_soon = {"g2": NOW + 0.5 * HOUR}  # another job's slot begins before the job would end
    assert victims(new(), NOW, GRACE_S, {}, slot_soon, served, MAX_PREEMPTIONS) is None
    later = {"g2": NOW + 2 * HOUR}
    assert victims(new(), NOW, GRACE_S, {}, later, served, MAX_PREEMPTIONS) is not None
    served_job = Candidate(1, "u", NOW, NOW + HOUR, count=2, attained=SERVED, requeued=NOW - 60)
    assert victims(served_job, NOW, GRACE_S, {}, {}, served, MAX_PREEMPTIONS) is None


def test_a_preempted_job_goes_behind_new_ones_until_it_is_promoted() -> None:
    back = Candidate(1, "u", NOW - 5 * HOUR, NOW + HOUR, count=1, attained=SERVED,
                     requeued=NOW - 60)  # fmt: skip
    fresh = Candidate(2, "u", NOW - 60, NOW + HOUR, count=1)
    assert level(back.attained, back.requeued, NOW) == 1
    assert [c.job_id for c in queue_order([back, fresh], NOW, 8)] == [2, 1]
    later = NOW + PROMOTE_AFTER  # back at level 0: its old place again
    assert level(back.attained, back.requeued, later) == 0
    assert [c.job_id for c in queue_order([back, fresh], later, 8)] == [1, 2]


def test_the_replay_preempts_within_the_bound_and_keeps_the_queue_promises() -> None:
    trace = scaled(make_trace(400, seed=7), 16 * PER_HOST, 0.85)
    out = replay(trace, 16, "las")
    assert len(out.ends) == len(trace)  # every job completed
    assert out.preemptions and max(out.preemptions.values()) <= MAX_PREEMPTIONS
    assert out.late == 0 and not out.passed  # no kept slot moved, no job starved
    figures = summary(trace, out, 16 * PER_HOST)
    assert figures["split_required_jobs"] == 0
    # the work lost is at most a checkpoint interval and the grace per preemption
    assert 0 < out.lost <= sum(out.preemptions.values()) * (CHECKPOINT_S + GRACE_S + 1)
    by_id = {j.job_id: j for j in trace}
    for job_id in out.preemptions:  # completion includes the time lost
        assert out.ends[job_id] - by_id[job_id].submit >= by_id[job_id].runtime + out.waits[job_id]
