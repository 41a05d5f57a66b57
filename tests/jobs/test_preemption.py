"""Preemptible jobs end to end: the real Scheduler, launcher, probe and processes.

A real Python job, run in screen as the real test user on a simulated GPU host, borrows an
idle reservation's GPU; the holder (another real user) starts a process on it; the job gets
its signal, checkpoints to `$GPUHIVE_CHECKPOINT_DIR`, is stopped and requeued, later resumes
from the checkpoint and finishes with the right sum.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jupyter_gpuhive.jobs.preemption import PreemptionSettings
from jupyter_gpuhive.model.jobs import Job
from jupyter_gpuhive.protection.violations import DetectionPolicy, detect
from jupyter_gpuhive.sim.users import start_gpu_process
from jupyter_gpuhive.store import Changes
from tests.jobs import test_jobs_queue
from tests.jobs.test_jobs_queue import OTHER, OWNER, Bed, queued

# The queue tests' bed: store, pool, launcher, sampler and scheduler over simulated hosts.
users = test_jobs_queue.users
bed = test_jobs_queue.bed

# Sums 0..STEPS-1, one step every 0.1 s; saves every 10 steps and when told to stop (by the
# signal gpuhive names in GPUHIVE_PREEMPT_SIGNAL), resumes from the saved state.
WORKER = """\
import json, os, signal, sys, time
path = os.path.join(os.environ["GPUHIVE_CHECKPOINT_DIR"], "state.json")
state = {"step": 0, "total": 0}
if os.path.exists(path):
    with open(path) as f:
        state = json.load(f)
    print(f"resumed from step {state['step']} restarts {os.environ['GPUHIVE_RESTARTS']}",
          flush=True)
told = []
signal.signal(getattr(signal, os.environ["GPUHIVE_PREEMPT_SIGNAL"]), lambda *_: told.append(1))
print(f"grace {os.environ['GPUHIVE_GRACE_S']}", flush=True)
def save():
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
steps = int(os.environ.get("STEPS", "60"))
while state["step"] < steps:
    if told:
        save()
        print(f"checkpointed at step {state['step']}", flush=True)
        sys.exit(0)
    time.sleep(0.1)
    state["total"] += state["step"]
    state["step"] += 1
    print(f"step {state['step']}", flush=True)
    if state["step"] % 10 == 0:
        save()
print(f"result {state['total']}", flush=True)
"""
STEPS = 40


def preemptible(**kwargs: Any) -> Job:
    kwargs.setdefault("env", {"STEPS": str(STEPS)})
    return queued("python3 -c {worker}", variables={"worker": WORKER}, preemptible=True,
                  **kwargs)  # fmt: skip


def book(bed: Bed, owner: str, host: str, index: int, start: datetime, hours: float = 1) -> int:
    gpu = bed.store.inventory.gpu(f"{host}:{index}")
    assert gpu is not None
    end = start + timedelta(hours=hours)
    return bed.store.reservations.create(owner, "lent", "", start, end, [gpu.id]).id


async def log_text(bed: Bed, job_id: int) -> str:
    return (await bed.launcher.log(bed.job(job_id).tasks[0])).text


async def until(check: Any, seconds: float = 20) -> None:
    async with asyncio.timeout(seconds):
        while not await check():
            await asyncio.sleep(0.1)


def _settings(bed: Bed, **kwargs: Any) -> None:
    bed.scheduler.preemption = PreemptionSettings(**kwargs)
    bed.launcher.preemption = bed.scheduler.preemption


async def test_a_preemptible_job_gives_the_gpu_back_checkpoints_and_resumes(bed: Bed) -> None:
    _settings(bed, grace_s=5, watch_interval=0.2)
    events: list[dict[str, Any]] = []
    bed.scheduler.preempted = events.append  # what becomes the job.preempted webhook event
    rid = book(bed, OTHER, "jq1", 0, datetime.now(UTC) - timedelta(minutes=1))
    made = await bed.create(preemptible(preempt_signal="SIGUSR1", grace_s=3),
                            bed.slots("jq1", 0))  # fmt: skip

    report = await bed.tick()
    assert report.admitted == [made.id], report.waiting
    running = bed.job(made.id)
    assert running.lent_from == rid and running.restarts == 0
    loans = bed.store.preemption.open_loans(rid)
    assert [(loan.job_id, loan.gpus) for loan in loans] == [(made.id, (bed.uuid("jq1", 0),))]

    async def stepping() -> bool:
        return "step 5\n" in await log_text(bed, made.id)

    await until(stepping)
    text = await log_text(bed, made.id)
    assert "grace 3\n" in text  # the job asked for less than the site's 5 s

    holder = start_gpu_process(bed.sims["jq1"].name, [bed.uuid("jq1", 0)], user=OTHER)
    try:
        # The holder's process and the job's share the GPU during the grace: no violation
        # against either of them.
        sweep = await bed.sampler.sweep()
        res = bed.store.reservations.get(rid)
        lent = await bed.scheduler.lent_processes(sweep)
        found = detect(sweep.samples.values(), [res], sweep.at, DetectionPolicy(level=1),
                       lent=lent)  # fmt: skip
        assert found == [], found

        async def requeued() -> bool:
            return bed.job(made.id).status == "pending"

        await until(requeued)
        await bed.scheduler.settle()
        back = bed.job(made.id)
        assert back.restarts == 1 and back.lent_from is None
        assert [e.kind for e in back.history] == ["preempted"]
        assert "process" in back.history[0].detail and OTHER in back.history[0].detail
        assert "SIGUSR1" in back.history[0].detail
        # What it cost: the run had one GPU from its start to the reclaim, all of it lost
        # (gpuhive does not know the last checkpoint); no run now, so that is all its service.
        started = running.tasks[0].started_at
        assert started is not None
        ran = (back.history[0].at - started).total_seconds()
        cost = back.preemption_cost(datetime.now(UTC))
        assert cost["preemptions"] == 1 and ran > 0
        assert (
            abs(cost["lost_gpu_h"] * 3600 - ran) < 1 and cost["service_gpu_h"] == cost["lost_gpu_h"]
        )
        assert events == [{"job": made.id, "owner": OWNER, "reservation": rid,
                           "signal": "SIGUSR1", "grace_s": 3.0, "restarts": 1}]  # fmt: skip
        text = await log_text(bed, made.id)
        assert "checkpointed at step" in text
        saved = int(text.split("checkpointed at step ")[1].split()[0])
        assert 5 <= saved < STEPS
        assert bed.store.preemption.open_loans(rid) == []

        # The holder still computes: the job waits.
        report = await bed.tick()
        assert report.admitted == [] and made.id in report.waiting
    finally:
        holder.kill()
        holder.wait()

    # The holder is done (its process gone): the GPU is lent again, the job resumes.
    async def resumed() -> bool:
        sweep = await bed.sampler.sweep()
        return made.id in (await bed.scheduler.tick(sweep)).admitted

    await until(resumed)

    async def finished() -> bool:
        return bed.job(made.id).status in ("succeeded", "failed")

    async def synced() -> bool:
        await bed.launcher.sync()
        return await finished()

    await until(synced)
    done = bed.job(made.id)
    assert done.status == "succeeded"
    text = await log_text(bed, made.id)
    assert f"resumed from step {saved} restarts 1" in text
    assert f"result {sum(range(STEPS))}\n" in text
    assert [e.kind for e in done.history] == ["preempted", "resumed"]
    # Its service: the preempted run and the one that finished; nothing more lost.
    cost = done.preemption_cost(datetime.now(UTC))
    [task] = done.tasks
    assert task.started_at is not None and task.ended_at is not None
    second = (task.ended_at - task.started_at).total_seconds()
    assert cost["lost_gpu_h"] * 3600 == pytest.approx(ran, abs=1)
    assert (cost["service_gpu_h"] - cost["lost_gpu_h"]) * 3600 == pytest.approx(second, abs=1)


async def test_no_lending_when_the_booking_or_the_site_forbids_it(bed: Bed) -> None:
    rid = book(bed, OTHER, "jq2", 0, datetime.now(UTC) - timedelta(minutes=1))
    bed.store.preemption.set_lending(rid, lend=False, reclaim_before_start=False)
    made = await bed.create(preemptible(), bed.slots("jq2", 0))
    report = await bed.tick()
    assert report.admitted == [] and "reserved" in report.waiting[made.id]

    bed.store.preemption.set_lending(rid, lend=True, reclaim_before_start=False)
    _settings(bed, lending=False)
    report = await bed.tick()
    assert report.admitted == [] and "reserved" in report.waiting[made.id]

    plain = await bed.create(queued("sleep 30"), bed.slots("jq2", 0))
    _settings(bed, lending=True)
    report = await bed.tick()
    assert report.admitted == [made.id]  # not the plain job: only preemptible ones borrow
    assert "reserved" in report.waiting[plain.id] or "runs job" in report.waiting[plain.id]


async def test_reclaim_before_start_and_by_request(bed: Bed) -> None:
    _settings(bed, grace_s=2, reclaim_before_start_s=3600)
    soon = datetime.now(UTC) + timedelta(minutes=30)
    early = book(bed, OTHER, "jq2", 1, soon)
    bed.store.preemption.set_lending(early, lend=True, reclaim_before_start=True)
    made = await bed.create(preemptible(walltime=timedelta(hours=2)), bed.slots("jq2", 1))
    report = await bed.tick()
    assert report.admitted == [] and "reserved" in report.waiting[made.id]

    bed.store.preemption.set_lending(early, lend=True, reclaim_before_start=False)
    report = await bed.tick()
    assert report.admitted == [made.id], report.waiting
    bed.store.reservations.modify(early, lambda _: Changes(start=datetime.now(UTC)
                                                           - timedelta(minutes=1)))  # fmt: skip
    await bed.tick()
    assert bed.job(made.id).lent_from == early
    # Jobs.reclaim: Bookings.stop_lending first (tests/test_bookings_wiring.py), then this
    bed.store.preemption.set_lending(early, lend=False, reclaim_before_start=None)
    jobs, free_by = await bed.scheduler.reclaim_reservation(early, "the holder asked")
    assert jobs == [made.id] and free_by > datetime.now(UTC)
    again, _ = await bed.scheduler.reclaim_reservation(early, "the holder asked")
    assert again == [made.id]  # still on its way out: not signalled twice
    await bed.scheduler.settle()
    back = bed.job(made.id)
    assert back.status == "pending" and back.restarts == 1
    assert "the holder asked" in back.history[0].detail
    # the holder asked for the GPUs: the booking lends no more, so the job is not put back
    assert bed.store.preemption.lending([early])[early] == (False, False)
    report = await bed.tick()
    assert report.admitted == [] and "reserved" in report.waiting[made.id]


async def test_a_job_preempted_too_often_runs_in_unbooked_time_only(bed: Bed) -> None:
    _settings(bed, grace_s=1, max_preemptions=1)
    book(bed, OTHER, "jq1", 3, datetime.now(UTC) - timedelta(minutes=1))
    made = await bed.create(preemptible(), bed.slots("jq1", 3))
    assert (await bed.tick()).admitted == [made.id]
    # What a kernel start of the holder's does first (kernels/provisioner.py): make way.
    await bed.scheduler.make_way("someone else", (bed.uuid("jq1", 3),), "not the holder")
    assert bed.job(made.id).status == "running"
    await bed.scheduler.make_way(OTHER, (bed.uuid("jq1", 3),), f"{OTHER} starts a kernel")
    back = bed.job(made.id)  # it waited for the job to go
    assert back.status == "pending" and f"{OTHER} starts a kernel" in back.history[0].detail
    assert [e.kind for e in back.history] == ["preempted", "exhausted"]
    report = await bed.tick()
    assert report.admitted == [] and "reserved" in report.waiting[made.id]


async def test_a_process_that_calls_itself_the_holders_reclaims_nothing(bed: Bed) -> None:
    """The job's owner starts another process on the lent GPU, named like the holder's: the
    probe reads its owner from /proc (the real UID), so no reclaim, and it is a violation
    (it is not the lent job's)."""
    _settings(bed, grace_s=2, watch_interval=0.1)
    rid = book(bed, OTHER, "jq2", 2, datetime.now(UTC) - timedelta(minutes=1))
    made = await bed.create(preemptible(), bed.slots("jq2", 2))
    assert (await bed.tick()).admitted == [made.id]
    uuid = bed.uuid("jq2", 2)
    fake = start_gpu_process(bed.sims["jq2"].name, [uuid], user=OWNER,
                             command=("bash", "-c", f"exec -a {OTHER} sleep 600"))  # fmt: skip
    try:
        sweep = await bed.sampler.sweep()
        lent = await bed.scheduler.lent_processes(sweep)
        [proc] = [p for p in sweep.samples["jq2"].processes if p.pid == fake.pid]
        assert proc.user == OWNER and OTHER in proc.command
        report = await bed.scheduler.tick(sweep)
        await asyncio.sleep(0.5)  # several rounds of the watch
        job = bed.job(made.id)
        assert made.id not in report.stopping and job.status == "running" and job.history == ()
        res = bed.store.reservations.get(rid)
        found = detect(sweep.samples.values(), [res], sweep.at, DetectionPolicy(level=1),
                       lent=lent)  # fmt: skip
        assert [(v.offender, v.pids) for v in found] == [(OWNER, (fake.pid,))]
    finally:
        fake.kill()
        fake.wait()


async def test_a_job_that_ignores_its_signal_is_killed_after_the_grace(bed: Bed) -> None:
    _settings(bed, grace_s=1, watch_interval=0.1)
    rid = book(bed, OTHER, "jq2", 3, datetime.now(UTC) - timedelta(minutes=1))
    stubborn = "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT):\n" \
        "    signal.signal(s, signal.SIG_IGN)\nprint('ignoring', flush=True)\ntime.sleep(600)\n"  # fmt: skip
    made = await bed.create(queued("python3 -c {w}", variables={"w": stubborn}, preemptible=True),
                            bed.slots("jq2", 3))  # fmt: skip
    assert (await bed.tick()).admitted == [made.id]

    async def ignoring() -> bool:
        return "ignoring" in await log_text(bed, made.id)

    await until(ignoring)
    await bed.scheduler.reclaim_reservation(rid, "the holder asked")
    await bed.scheduler.settle()
    back = bed.job(made.id)
    assert back.status == "pending" and back.restarts == 1
    assert [e.kind for e in back.history] == ["preempted"]
    sweep = await bed.sampler.sweep()
    assert not [p for p in sweep.samples["jq2"].processes if p.user == OWNER]


async def test_the_holders_job_waits_for_the_reclaim_and_reclaim_before_start(bed: Bed) -> None:
    _settings(bed, grace_s=1, reclaim_before_start_s=3600)
    book(bed, OTHER, "jq1", 1, datetime.now(UTC) - timedelta(minutes=1))
    made = await bed.create(preemptible(), bed.slots("jq1", 1))
    assert (await bed.tick()).admitted == [made.id]
    mine = Job(name=f"h{made.id}", owner=OTHER, command="sleep 30")
    holders = await bed.create(mine, bed.slots("jq1", 1))
    started = await bed.launcher.start(holders.id)  # reclaims first, then starts
    assert started.ok, started.message
    back = bed.job(made.id)
    assert back.status == "pending" and back.restarts == 1
    assert f"starts job {holders.id}" in back.history[0].detail
    await bed.launcher.stop(holders.id, grace=0)

    # A booking that takes its GPUs back before its start: lent until then, reclaimed then.
    later = book(bed, OTHER, "jq1", 2, datetime.now(UTC) + timedelta(minutes=30))
    early = await bed.create(preemptible(walltime=timedelta(hours=2)), bed.slots("jq1", 2))
    assert early.id in (await bed.tick()).admitted  # (the first borrows jq1:1 again too)
    bed.store.preemption.set_lending(later, lend=True, reclaim_before_start=True)
    report = await bed.tick()
    assert "before its start" in report.stopping[early.id]
    await bed.scheduler.settle()
    assert bed.job(early.id).status == "pending"
    assert [loan.job_id for loan in bed.store.preemption.open_loans(later)] == []
