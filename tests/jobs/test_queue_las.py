"""Least attained service for preemptible jobs: who may be preempted, the bound per job, and the
replay that models the grace and the work lost since the last checkpoint."""

from __future__ import annotations

from dataclasses import replace

from jupyter_gpuhive.jobs.admission import GpuState, PassResult, Slot
from jupyter_gpuhive.jobs.attained import PAYS, Runner, takeovers, victims
from jupyter_gpuhive.jobs.order import LEVELS_GPU_H, PROMOTE_AFTER, level, queue_order
from jupyter_gpuhive.jobs.plan import Candidate
from tests.support.las_replay import CHECKPOINT_S, GRACE_S, MAX_PREEMPTIONS
from tests.support.queue_figures import RATIOS, against_baselines
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


def test_a_job_is_preempted_only_when_the_swap_pays() -> None:
    """A served job near the end of its walltime is left to end: preempted only when it would
    hold its GPUs longer than PAYS times the new job's walltime plus the grace;
    the one with the most work left (GPUs x walltime left) goes first, not the most served."""
    job = new(gpus=1, hours=1.0)  # needs its GPU 1 h
    pays = NOW + PAYS * HOUR + GRACE_S
    near = Runner(7, "h", ("g0",), 10 * SERVED, 0, release=pays - 60)
    assert victims(job, NOW, GRACE_S, {}, {}, [near], MAX_PREEMPTIONS) is None
    far = Runner(8, "h", ("g1",), SERVED, 0, release=pays + 60)
    found = victims(job, NOW, GRACE_S, {}, {}, [near, far], MAX_PREEMPTIONS)
    assert found is not None and found.victims == (8,) and found.gpus == ("g1",)
    longer = Runner(9, "h", ("g2",), SERVED, 0, release=NOW + 9 * HOUR)
    found = victims(job, NOW, GRACE_S, {}, {}, [far, longer], MAX_PREEMPTIONS)
    assert found is not None and found.victims == (9,)
    # What the pass knows of running work: takeovers read each runner's walltime end from
    # the GPU states (the Scheduler's and the replay's alike).
    gpus = ("g00", "g01", "g02", "g03")
    result = PassResult(waiting={1: "waiting for 2 free GPUs on one host"})
    runners = [Runner(7, "h0", gpus, SERVED * 2, 0)]
    soon = {u: replace(s, release=NOW + 0.5 * HOUR) for u, s in states(1, busy=gpus).items()}
    assert takeovers(result, {1: new(1, gpus=2)}, soon, runners, NOW, GRACE_S,
                     MAX_PREEMPTIONS) == []  # fmt: skip
    [way] = takeovers(result, {1: new(1, gpus=2, hours=0.2)}, soon, runners, NOW, GRACE_S,
                      MAX_PREEMPTIONS)  # fmt: skip
    assert way.victims == (7,)


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


def test_the_figures_are_the_live_policys_against_easy_and_fifo_at_both_loads() -> None:
    """`benchmarks/job_queue.py`'s replay figures: the queue as the Scheduler runs it (las),
    against EASY and FIFO in the same run, at the busy and the light load."""
    found = against_baselines(make_trace(120, seed=7), 8, seed=7)
    asked = {f"{key}_vs_{base}" for base in ("easy", "fifo") for key, _, _ in RATIOS}
    assert found["policy"] == "las" and asked <= set(found)
    assert set(found["by_load"]) == {"busy", "light"}
    for figures in found["by_load"].values():
        assert figures["policy"] == "las" and asked <= set(figures)
        assert asked == set(figures["without_preemption"])
        assert all(isinstance(figures[k], float) and figures[k] > 0 for k in asked)
        assert figures["max_preemptions_per_job"] <= found["preemption_bound"]
    assert found["preemption_bound"] == MAX_PREEMPTIONS and found["starved_jobs"] == 0
    worst = max(f["mean_wait_vs_easy"] for f in found["by_load"].values())
    assert found["mean_wait_vs_easy"] == worst


def states(hosts: int = 2, busy: tuple[str, ...] = ()) -> dict[str, GpuState]:
    """GPUs g<host><index> of hosts h0.., 4 each; `busy` ones run a job."""
    out = {}
    for h in range(hosts):
        for i in range(4):
            uuid = f"g{h}{i}"
            why = f"h{h}:{i} runs a job" if uuid in busy else None
            out[uuid] = GpuState(uuid, f"h{h}", i, f"h{h}:{i}", why, release=NOW + 9 * HOUR)
    return out


def test_takeovers_keep_the_wide_job_rule_the_access_rules_and_bookings() -> None:
    gpus = ("g00", "g01", "g02", "g03")
    runners = [Runner(7, "h0", gpus, SERVED * 2, 0)]
    state = states(1, busy=gpus)
    fresh = {1: new(1, gpus=2)}
    result = PassResult(waiting={1: "waiting for 2 free GPUs on one host"})
    args = (fresh, state, runners, NOW, GRACE_S, MAX_PREEMPTIONS)
    [way] = takeovers(result, *args)
    assert way.victims == (7,) and len(way.gpus) == 2 and set(way.gpus) <= set(gpus)
    assert takeovers(result, *args, skip={1}) == []  # a takeover of its own under way
    assert takeovers(result, *args, usable=lambda job, uuid, end: uuid != "g03") == []
    shared = {1: replace(fresh[1], count=1, memory=8192)}  # a share job: packed, never this
    assert takeovers(result, shared, state, runners, NOW, GRACE_S, MAX_PREEMPTIONS) == []
    only = {1: replace(fresh[1], only=frozenset({"g00"}))}  # a vendor with one GPU there
    assert takeovers(result, only, state, runners, NOW, GRACE_S, MAX_PREEMPTIONS) == []
    booked = {**state, "g02": replace(state["g02"], free_until=NOW + HOUR)}  # before its end
    assert takeovers(result, fresh, booked, runners, NOW, GRACE_S, MAX_PREEMPTIONS) == []

    # A waiting wide job (wider than a host) with a slot and a shorter walltime is ahead of
    # it: it may not start before the wide job, so it preempts nothing either.
    wide = Candidate(2, "u", NOW - 120, NOW + 0.5 * HOUR, count=8)
    slot = Slot(NOW + 9 * HOUR, NOW + 9.5 * HOUR, tuple(states(2)))
    behind = PassResult(waiting={2: "waiting for 8 free GPUs", 1: "behind"}, planned={2: slot})
    pending = {**fresh, 2: wide}
    two = states(2, busy=(*gpus, "g10", "g11", "g12", "g13"))
    assert takeovers(behind, pending, two, runners, NOW, GRACE_S, MAX_PREEMPTIONS) == []
    short = {**pending, 1: new(1, gpus=2, hours=0.25)}  # no longer than the wide job's
    [way] = takeovers(behind, short, two, runners, NOW, GRACE_S, MAX_PREEMPTIONS)
    assert way.victims == (7,)  # and it ends before the wide job's slot begins
