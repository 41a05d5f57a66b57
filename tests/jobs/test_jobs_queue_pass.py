"""The queue's pure parts: the admission pass, estimates, GPU states; and its store methods."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.admission import (
    Candidate,
    GpuState,
    admit,
    gpu_count,
    template_options,
)
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.jobs.order import queue_order, standing
from jupyter_gpuhive.jobs.queue import bookings_of, candidates, gpu_states, reserved_spans
from jupyter_gpuhive.jobs.timeline import Line
from jupyter_gpuhive.model import Gpu, GpuDecl, HostDecl, Reservation, utcnow
from jupyter_gpuhive.model.jobs import Job, Task, TaskState
from jupyter_gpuhive.monitor.sampler import Sweep
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import TaskChange

NOW = 1_900_000_000.0
H = 3600.0


def gpu(host: str, index: int, **kwargs: object) -> GpuState:
    return GpuState(f"{host}-{index}", host, index, f"{host}:{index}", **kwargs)  # type: ignore[arg-type]


def world(*states: GpuState) -> dict[str, GpuState]:
    return {s.uuid: s for s in states}


def job(job_id: int, *gpus: str, count: int = 0, hours: float = 1, created: float = 0,
        owner: str = "ann") -> Candidate:  # fmt: skip
    return Candidate(job_id, owner, created or job_id, NOW + hours * H, tuple(gpus), count)


class OnlyOn:
    """Access: `owner` may use just the listed GPUs; everyone else everything."""

    def __init__(self, owner: str, allowed: set[str]) -> None:
        self.owner, self.allowed = owner, allowed

    def restricted(self, owner: str) -> bool:
        return owner == self.owner

    def allows(self, owner: str, uuid: str, end: float) -> bool:
        return uuid in self.allowed


# --- the admission pass ----------------------------------------------------------------------


def test_gang_waits_for_all_and_backfill_lets_later_jobs_through() -> None:
    # The gang job is first in the queue (submitted 5 h before the others: its 2 GPU-hours
    # delay it 2 h, theirs 1 h), yet its a-1 is busy with no known end: it waits without
    # taking a-0, and the jobs behind it start.
    gpus = world(gpu("a", 0), gpu("a", 1, blocker="a:1 runs job 9"), gpu("a", 2))
    jobs = [job(1, "a-0", "a-1", created=NOW - 5 * H), job(2, "a-0", created=NOW - 10),
            job(3, "a-2", created=NOW - 5)]  # fmt: skip
    assert [c.job_id for c in queue_order(jobs, NOW, 3)] == [1, 2, 3]
    result = admit(jobs, gpus, NOW)
    assert [(a.job_id, a.gpus) for a in result.admitted] == [(2, ("a-0",)), (3, ("a-2",))]
    assert result.waiting == {1: "a:1 runs job 9"}  # a-0 was not taken for the gang job


def test_claims_in_one_pass_go_in_queue_order() -> None:
    """Jobs of the same area: first come, first served (by submission, not id or input
    order). A smaller job goes before a bigger one submitted less than the difference of
    their delays (1 h per GPU-hour) before it; submitted earlier than that, the bigger one
    goes first."""
    gpus = world(gpu("a", 0), gpu("a", 1))
    early = job(7, "a-1", created=NOW - 100)  # higher id, created first
    late = job(3, "a-1", created=NOW - 50)
    result = admit([late, early], gpus, NOW)
    assert [a.job_id for a in result.admitted] == [7]
    assert result.waiting == {3: "a:1 went to a job ahead of it in the queue"}

    wide = job(7, "a-0", "a-1", created=NOW - 100)  # 2 GPU-hours: 2 h of delay, 1 h more
    result = admit([wide, late], gpus, NOW)
    assert [a.job_id for a in result.admitted] == [3]
    assert list(result.waiting) == [7] and result.planned[7].start == NOW + H
    aged = replace(wide, created=NOW - H - 100)  # submitted more than that hour earlier
    result = admit([late, aged], gpus, NOW)
    assert [a.job_id for a in result.admitted] == [7]
    assert result.waiting == {3: "a:1 went to a job ahead of it in the queue"}


def test_a_small_job_overtakes_an_earlier_big_one_within_its_delay() -> None:
    """Smallest area first: a 1-hour job submitted an hour after a 10-hour one on the same
    GPU starts first (queue times: 1 h vs 10 h after their submissions); the big job waits,
    next in the queue, with a slot from the small one's end. Submitted more than 9 h before
    the small one, the big job goes first."""
    gpus = world(gpu("a", 0))
    big = job(1, "a-0", hours=10, created=NOW - 2 * H)
    small = job(2, "a-0", created=NOW - H)
    result = admit([big, small], gpus, NOW)
    assert [a.job_id for a in result.admitted] == [2]
    assert list(result.waiting) == [1] and result.planned[1].start == NOW + H
    assert standing(result.waiting)[1]["place"] == 1
    aged = replace(big, created=NOW - 11 * H)  # queue time NOW - 1 h: before the small one's
    result = admit([aged, small], gpus, NOW)
    assert [a.job_id for a in result.admitted] == [1]
    assert result.planned[2].start == NOW + 10 * H


def test_walltime_must_end_before_the_next_reservation() -> None:
    gpus = world(gpu("a", 0, free_until=NOW + 2 * H), gpu("a", 1, free_until=NOW - 1))
    # job 1 first in the queue (submitted 5 h before), then the 2-hour one
    jobs = [job(1, "a-0", hours=3, created=NOW - 5 * H), job(2, "a-0", hours=2, created=NOW),
            job(3, "a-1", created=NOW)]  # fmt: skip
    assert queue_order(jobs, NOW, 2)[0].job_id == 1
    result = admit(jobs, gpus, NOW)
    assert [a.job_id for a in result.admitted] == [2]  # ends exactly as the booking begins
    assert result.waiting[1].startswith("a:0 is reserved from 2030-03-17")
    assert "a:1 is reserved" in result.waiting[3]  # reserved now


def test_unknown_gpu_and_access_rules() -> None:
    gpus = world(gpu("a", 0), gpu("a", 1))
    check = OnlyOn("bob", {"a-1"})
    jobs = [job(1, "zz-9"), job(2, "a-0", owner="bob"), job(3, "a-1", owner="bob"),
            job(4, "a-0")]  # fmt: skip
    result = admit(jobs, gpus, NOW, access=check)
    assert [a.job_id for a in result.admitted] == [3, 4]
    assert "not known" in result.waiting[1]
    assert result.waiting[2] == "the access rules do not let bob use a:0 until then"


def test_count_only_prefers_one_host_best_fit_then_fewest_hosts() -> None:
    gpus = world(
        *(gpu("big", i) for i in range(4)),
        *(gpu("small", i) for i in range(2)),
        gpu("small", 2, blocker="busy"),
    )
    # taken in the order 1, 2, 3: each submitted late enough after the one before that its
    # smaller area does not put it ahead
    jobs = [job(1, count=2, created=NOW - 10 * H), job(2, count=3, created=NOW - 10 * H),
            job(3, count=1, created=NOW - 5 * H)]  # fmt: skip
    assert [c.job_id for c in queue_order(jobs, NOW, 4)] == [1, 2, 3]
    result = admit(jobs, gpus, NOW)
    placed = {a.job_id: a.gpus for a in result.admitted}
    assert placed[1] == ("small-0", "small-1")  # the host where 2 fit most tightly
    assert len(placed[2]) == 3 and {u.split("-")[0] for u in placed[2]} == {"big"}
    assert placed[3] == ("big-0",) or len(placed[3]) == 1
    assert len(set(placed[1] + placed[2] + placed[3])) == 6  # nothing taken twice

    # Taken smallest first (submitted together): the 1-GPU job takes the tightest host,
    # the 2-GPU job the only host with room for it, and 3 GPUs no longer fit on one host.
    result = admit([job(1, count=2), job(2, count=3), job(3, count=1)], gpus, NOW)
    placed = {a.job_id: a.gpus for a in result.admitted}
    assert placed[3] in (("small-0",), ("small-1",))
    assert len(placed[1]) == 2 and {u.split("-")[0] for u in placed[1]} == {"big"}
    assert result.waiting == {2: "waiting for 3 free GPUs on one host"}

    spread = admit([job(1, count=5)], gpus, NOW)
    assert len(spread.admitted[0].gpus) == 5  # 4 on big + 1 on small: as few hosts as can be
    assert sum(u.startswith("big") for u in spread.admitted[0].gpus) == 4
    assert admit([job(1, count=7)], gpus, NOW).waiting == {1: "waiting for 7 free GPUs"}


def test_count_only_takes_gpus_whose_booking_comes_soonest_after_its_end() -> None:
    gpus = world(
        gpu("a", 0, free_until=NOW + 10 * H),
        gpu("a", 1, free_until=NOW + 2 * H),
        gpu("a", 2, free_until=NOW + 30 * 60),
        gpu("a", 3),
    )
    jobs = [job(1, count=1), job(2, count=2, hours=5), job(3, count=1, hours=3)]
    result = admit(jobs, gpus, NOW)
    placed = {a.job_id: a.gpus for a in result.admitted}
    # smallest area first (1, 3, then 2): the 3-hour job takes a-0 (booked from 10 h), not
    # a-3 (never booked), which stays free for longer jobs
    assert placed == {1: ("a-1",), 3: ("a-0",)}
    assert 2 in result.waiting
    # the 10 GPU-hour job submitted 10 h before: first in the queue, it gets a-0 and a-3
    first = [replace(jobs[0], created=NOW), replace(jobs[1], created=NOW - 10 * H),
             replace(jobs[2], created=NOW)]  # fmt: skip
    assert queue_order(first, NOW, 4)[0].job_id == 2
    result = admit(first, gpus, NOW)
    placed = {a.job_id: a.gpus for a in result.admitted}
    assert placed == {1: ("a-1",), 2: ("a-0", "a-3")}  # the long-free GPUs kept for long jobs
    assert 3 in result.waiting


def test_count_failures_are_remembered_but_not_across_restricted_owners() -> None:
    gpus = world(gpu("a", 0), gpu("a", 1, free_until=NOW + H / 2))
    check = OnlyOn("bob", {"a-0"})
    jobs = [job(1, count=2), job(2, count=3), job(3, count=1, owner="bob"), job(4, count=1)]
    result = admit(jobs, gpus, NOW, access=check)
    assert [(a.job_id, a.gpus) for a in result.admitted] == [(3, ("a-0",))]
    assert set(result.waiting) == {1, 2, 4}


def test_a_waiting_gang_job_keeps_its_gpus_from_when_they_all_free_up() -> None:
    # Changed with backfill slots: the old `drain_after` hold kept a-0 idle for job 1; now
    # job 1 holds a slot from a-1's release, and a job that ends by then may use a-0.
    gpus = world(gpu("a", 0), gpu("a", 1, blocker="a:1 runs job 5", release=NOW + H))
    old = job(1, "a-0", "a-1", created=NOW - 5 * H)
    short = job(2, "a-0", created=NOW - 10)  # 1 h: ends as job 1's slot begins
    long = job(3, "a-0", hours=2, created=NOW - 5)
    result = admit([old, short, long], gpus, NOW)
    assert [a.job_id for a in result.admitted] == [2]
    assert result.planned[1].start == NOW + H and result.planned[1].gpus == ("a-0", "a-1")
    assert result.waiting[3] == "a:0 went to a job ahead of it in the queue"
    alone = admit([old, long], gpus, NOW)
    assert alone.admitted == [] and alone.waiting[3].startswith("a:0 is kept for queued job 1")
    # A blocker with no known end (a foreign process): no slot, so nothing is kept.
    foreign = world(gpu("a", 0), gpu("a", 1, blocker="a:1 runs process 7 of eve"))
    result = admit([old, long], foreign, NOW)
    assert [a.job_id for a in result.admitted] == [3] and result.planned == {}


# --- estimates ----------------------------------------------------------------------------------


def test_a_timeline_fits_between_busy_spans() -> None:
    line = Line("u", "h", 0, 5.0, [(10.0, 20.0), (25.0, 30.0), (15.0, 22.0)])
    assert line.fit(0, 5) == 5  # from when it is free
    assert line.fit(0, 10) == 30  # overlapping spans are merged: 10-22, 25-30
    assert line.fit(21, 3) == 22
    assert line.free(22, 25) and not line.free(21, 23)
    line.keep(40, 50, owner=7)
    assert line.fit(31, 10) == 50 and line.busy_from(31) == (40, 7)
    line.release(7)
    assert line.fit(31, 10) == 31
    assert Line("u", "h", 0, float("inf"), []).fit(0, 1) == float("inf")


def test_estimates_from_reservations_running_jobs_and_unknowns() -> None:
    gpus = world(
        gpu("a", 0, free_until=NOW + H),
        gpu("a", 1, blocker="a:1 runs job 4", release=NOW + 2 * H),
        gpu("a", 2, blocker="a:2 runs process 9 of eve"),
    )
    reserved = {"a-0": [(NOW + H, NOW + 3 * H)]}
    jobs = [job(1, "a-0"), job(2, "a-0", "a-1", hours=2), job(3, "a-2"), job(4, count=2)]
    later = Candidate(5, "ann", 5, NOW + 5 * H, ("a-0",), 0, NOW + 4 * H)
    result = admit([*jobs, later], gpus, NOW, reserved=reserved, horizon=NOW + 48 * H)
    # Queued jobs ahead count, in the queue's order (smallest area first: 1, 3, 5, 4, 2).
    # Job 1 runs now on a-0 (1 h, before the booking); job 3's GPU has no known end; job 5
    # takes a-0 at its start time (4 h), after the booking; job 4 needs two GPUs for an hour
    # from then on (no slot in a gap before one ahead of it): a-0 and a-1 are both free once
    # job 5 ends (5 h); job 2 (4 GPU-hours) comes after job 4.
    assert [c.job_id for c in queue_order([*jobs, later], NOW, 3)] == [1, 3, 5, 4, 2]
    found = result.starts(NOW)
    assert found == {1: NOW, 2: NOW + 6 * H, 3: None, 4: NOW + 5 * H, 5: NOW + 4 * H}
    assert result.planned[4].gpus == ("a-0", "a-1")
    assert result.planned[2].gpus == ("a-0", "a-1")


# --- inputs from jobs, reservations and a sweep --------------------------------------------------


def _stored_job(
    job_id: int,
    owner: str,
    host: str,
    uuids: list[str],
    state: TaskState = TaskState.PENDING,
    pgid: int | None = None,
    **kwargs: object,
) -> Job:
    """A job as the store returns it, with one task."""
    task = Task(
        id=job_id * 10, job_id=job_id, index=0, owner=owner, host=host, address="x", role="task",
        gpus=tuple(uuids), gpu_indices=tuple(range(len(uuids))), command="c", env={}, workdir=None,
        variables={}, session="s", log_path="l", exit_path="e", state=state, pgid=pgid,
        started_at=datetime.fromtimestamp(NOW - 60, UTC),
    )  # fmt: skip
    return Job(name=f"j{job_id}", owner=owner, command="c", id=job_id, tasks=(task,),
               created_at=datetime.fromtimestamp(NOW - 1000 + job_id, UTC), **kwargs)  # type: ignore[arg-type]  # fmt: skip


def test_gpu_states_tell_own_processes_from_foreign_ones() -> None:
    now = datetime.fromtimestamp(NOW, UTC)
    inv = [Gpu(i + 1, "h", i, f"h-{i}") for i in range(5)] + [Gpu(9, "down", 0, "down-0")]
    running = _stored_job(1, "ann", "h", ["h-0", "h-1"], state=TaskState.RUNNING, pgid=500,
                          queued=True, walltime=timedelta(hours=2))  # fmt: skip
    procs = (
        ProcessInfo(501, "h-0", "ann", "python", 10, 500),  # the job's own process group
        ProcessInfo(502, "h-1", "ann", "python", 10, 500),
        ProcessInfo(503, "h-2", "ann", "python", 10, 500),  # the job's, but off its GPUs
        ProcessInfo(600, "h-3", "eve", "python", 10, 600),  # someone else's
    )
    sweep = Sweep(now, 5.0, {"h": HostSample("h", now, processes=procs)}, {"down": "timeout"})
    res = Reservation(1, "bob", "t", "", now + timedelta(hours=1), now + timedelta(hours=2),
                      (inv[4],), now)  # fmt: skip
    states = gpu_states(inv, reserved_spans(bookings_of([res])), [running], sweep, now)
    assert states["h-0"].blocker == "h:0 runs job 1"
    assert states["h-0"].release == NOW - 60 + 2 * H
    assert states["h-2"].blocker == "h:2 runs process 503 of job 1"
    assert states["h-3"].blocker == "h:3 runs process 600 of eve"
    assert states["h-4"].blocker is None and states["h-4"].free_until == NOW + H
    assert states["down-0"].blocker == "down did not answer the last sweep: timeout"
    # Without process groups (an older probe) the owner on the task's GPU is recognised.
    bare = tuple(ProcessInfo(p.pid, p.gpu_uuid, p.user, p.command, 1) for p in procs)
    sweep2 = Sweep(now, 5.0, {"h": HostSample("h", now, processes=bare)}, {})
    states2 = gpu_states(inv, {}, [running], sweep2, now)
    assert states2["h-2"].blocker == "h:2 runs process 503 of ann"
    # Without a sweep only claims count.
    assert gpu_states(inv, {}, [running], None, now)["h-3"].blocker is None


def test_processes_of_a_task_seen_to_end_after_the_sweep_hold_nothing() -> None:
    """The sweep comes before the tick's sync: a task that ended in between still has its
    processes in the sweep. They are leaving, not someone else's: the GPU is free (else the
    GPU's release is unknown for a tick and a wide job's slot with it)."""
    now = datetime.fromtimestamp(NOW, UTC)
    inv = [Gpu(1, "h", 0, "h-0")]
    ended = _stored_job(1, "ann", "h", ["h-0"], state=TaskState.SUCCEEDED, pgid=500)
    procs = (ProcessInfo(501, "h-0", "ann", "python", 10, 500),)
    sweep = Sweep(now, 5.0, {"h": HostSample("h", now, processes=procs)}, {})
    assert gpu_states(inv, {}, [ended], sweep, now)["h-0"].blocker == (
        "h:0 runs process 501 of ann"
    )
    assert gpu_states(inv, {}, [ended], sweep, now, ended=[("h", 500)])["h-0"].blocker is None
    assert gpu_states(inv, {}, [ended], sweep, now, ended=[("other", 500)])["h-0"].blocker


def test_a_process_gone_before_its_owner_was_read_leaves_with_the_task_that_ended() -> None:
    """nvidia-smi listed the process, `ps` no longer found it: no user, no process group.
    On a GPU whose task was seen to end after the sweep it is that task's, leaving; anywhere
    else, or with an owner, it still holds its GPU (whose release nobody knows)."""
    now = datetime.fromtimestamp(NOW, UTC)
    inv = [Gpu(1, "h", 0, "h-0"), Gpu(2, "h", 1, "h-1")]
    ended = _stored_job(1, "ann", "h", ["h-0"], state=TaskState.SUCCEEDED, pgid=500)
    gone = ProcessInfo(501, "h-0", None, "python", 10)
    sweep = Sweep(now, 5.0, {"h": HostSample("h", now, processes=(gone,))}, {})
    before = gpu_states(inv, {}, [ended], sweep, now, ended=[("h", 500)])["h-0"]
    assert before.blocker == "h:0 runs process 501 of an unknown user"
    assert before.release is None
    states = gpu_states(inv, {}, [ended], sweep, now, ended=[("h", 500)], left=[("h", "h-0")])
    assert states["h-0"].blocker is None
    for left in ([("h", "h-1")], [("other", "h-0")]):
        assert gpu_states(inv, {}, [ended], sweep, now, left=left)["h-0"].blocker
    owned = replace(gone, user="bob")
    sweep = Sweep(now, 5.0, {"h": HostSample("h", now, processes=(owned,))}, {})
    blocked = gpu_states(inv, {}, [ended], sweep, now, left=[("h", "h-0")])["h-0"].blocker
    assert blocked == "h:0 runs process 501 of bob"


def test_candidates_and_planned_runs() -> None:
    now = datetime.fromtimestamp(NOW, UTC)
    q = _stored_job(1, "ann", "h", ["h-0"], queued=True, walltime=timedelta(minutes=1))
    expired = _stored_job(2, "ann", "h", ["h-0"], queued=True, stop_at=now)
    later = _stored_job(3, "ann", "h", ["h-1"], queued=True, start_at=now + timedelta(hours=1),
                        stop_at=now + timedelta(hours=1, minutes=30))  # fmt: skip
    counted = _stored_job(4, "ann", "h", [], queued=True, options={"gpu_count": 2})
    planned = _stored_job(5, "bob", "h", ["h-2"], start_at=now + timedelta(hours=3))
    found = {c.job_id: c for c in candidates([q, expired, later, counted, planned], now,
                                             timedelta(hours=1), min_length=300)}  # fmt: skip
    assert set(found) == {1, 3, 4}
    assert found[1].end == NOW + 300  # at least the preemption lead
    assert found[3].not_before == NOW + H and found[3].end == NOW + 1.5 * H
    assert found[4].count == 2 and found[4].gpus == () and found[4].end == NOW + H
    assert reserved_spans([], [planned]) == {"h-2": [(NOW + 3 * H, float("inf"))]}


def test_gpu_count_option() -> None:
    assert gpu_count({}) is None and gpu_count({"gpu_count": 3}) == 3
    for bad in (0, -1, True, "2", 1.5):
        with pytest.raises(ValueError):
            gpu_count({"gpu_count": bad})
    assert template_options({"gpu_count": 2, "per_gpu": True}) == {"per_gpu": True}


# --- store methods --------------------------------------------------------------------------------


def test_store_requeue_once_replace_tasks_and_schedulable(db_url: str) -> None:
    store = Store(db_url).open()
    try:
        store.inventory.sync([HostDecl("h", "10.0.0.1", gpus=(GpuDecl(0, "U0"), GpuDecl(1, "U1")))])
        slots = [("h", "10.0.0.1", [GpuSlot("h", "10.0.0.1", 0, "U0")])]
        spec = Job(name="q", owner="ann", command="run", queued=True, max_retries=1)
        queued = store.jobs.create(spec, render_tasks(spec, slots))
        done = store.jobs.create(Job(name="d", owner="ann", command="x"),
                                 render_tasks(spec, slots))  # fmt: skip
        counted = store.jobs.create(Job(name="c", owner="ann", command="x", queued=True,
                                           options={"gpu_count": 1}), [])  # fmt: skip
        store.jobs.change_tasks([TaskChange(done.tasks[0].id, TaskState.SUCCEEDED)])
        # pending, waiting for its owner to start it: nothing for the scheduler; with a
        # start or stop time it is the scheduler's
        waiting = store.jobs.create(Job(name="w", owner="ann", command="x"),
                                    render_tasks(spec, slots))  # fmt: skip
        timed = store.jobs.create(Job(name="t", owner="ann", command="x", stop_at=utcnow()),
                                  render_tasks(spec, slots))  # fmt: skip
        found, marked = store.jobs.schedulable()
        assert [j.id for j in found] == [queued.id, counted.id, timed.id] and marked == {}
        store.jobs.change_tasks([TaskChange(waiting.tasks[0].id, TaskState.RUNNING)])
        assert waiting.id in [j.id for j in store.jobs.schedulable()[0]]  # started: it holds
        store.jobs.change_tasks([TaskChange(waiting.tasks[0].id, TaskState.SUCCEEDED)])

        store.jobs.change_tasks([TaskChange(queued.tasks[0].id, TaskState.RUNNING)])
        with pytest.raises(Conflict):
            store.jobs.replace_tasks(queued.id, [])
        store.jobs.mark_requeue(queued.id, "reserved soon")
        assert not store.jobs.requeue(queued.id, expect={"stopped"})  # still running
        store.jobs.change_tasks([TaskChange(queued.tasks[0].id, TaskState.FAILED)])
        assert store.jobs.schedulable()[1] == {queued.id: "reserved soon"}
        assert store.jobs.requeue(queued.id, expect={"failed"}, note="retry", count_attempt=True)
        assert not store.jobs.requeue(queued.id, expect={"failed"}, count_attempt=True)  # once
        again = store.jobs.get(queued.id)
        assert again.attempts == 1 and again.status == "pending"
        assert again.tasks[0].last_error == "retry" and store.jobs.schedulable()[1] == {}

        two = [("h", "10.0.0.1", [GpuSlot("h", "10.0.0.1", i, f"U{i}") for i in (0, 1)])]
        bound = store.jobs.replace_tasks(
            counted.id, render_tasks(replace(counted, options={}), two)
        )
        assert [t.gpus for t in bound.tasks] == [("U0", "U1")]
        assert bound.tasks[0].session.startswith(f"gpuhive-{counted.id}-c-")
    finally:
        store.close()


def test_a_stop_made_after_the_queue_chose_a_job_holds(db_url: str) -> None:
    """The queue reads a snapshot, then places and starts; an owner's stop in between wins:
    a count job not yet placed leaves the queue (stopped) and cannot be placed any more, and a
    job whose pending tasks were stopped is not re-planned."""
    store = Store(db_url).open()
    try:
        store.inventory.sync([HostDecl("h", "10.0.0.1", gpus=(GpuDecl(0, "U0"),))])
        slots = [("h", "10.0.0.1", [GpuSlot("h", "10.0.0.1", 0, "U0")])]
        counted = store.jobs.create(Job(name="c", owner="ann", command="x", queued=True,
                                           options={"gpu_count": 1}), [])  # fmt: skip
        assert counted.status == "pending"
        assert store.jobs.withdraw(counted.id)
        stopped = store.jobs.get(counted.id)
        assert stopped.status == "stopped" and not stopped.queued
        assert counted.id not in [j.id for j in store.jobs.schedulable()[0]]
        specs = render_tasks(replace(counted, options={}), slots)
        with pytest.raises(Conflict, match="left the queue"):
            store.jobs.replace_tasks(counted.id, specs)
        assert store.jobs.get(counted.id).tasks == ()

        placed = store.jobs.create(Job(name="p", owner="ann", command="x", queued=True,
                                          options={"gpu_count": 1}), [])  # fmt: skip
        store.jobs.replace_tasks(placed.id, specs)
        assert not store.jobs.withdraw(placed.id)  # it has tasks now: those are stopped instead
        task = store.jobs.get(placed.id).tasks[0]
        store.jobs.change_tasks([TaskChange(task.id, TaskState.STOPPED)], {TaskState.PENDING})
        with pytest.raises(Conflict, match="changed before it could be placed"):
            store.jobs.replace_tasks(placed.id, specs)
        assert store.jobs.get(placed.id).status == "stopped"
        with pytest.raises(Exception, match="no job"):
            store.jobs.withdraw(10_000)
    finally:
        store.close()
