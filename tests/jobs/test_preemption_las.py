"""Least attained service on real jobs: the real Scheduler, launcher, probe and processes.

A preemptible job (the checkpointing worker of `test_preemption`) runs in screen as the real
test user on all four GPUs of a simulated host, the other host is full; once it has had more
than a GPU-hour (the scheduler's clock runs 20 minutes ahead of its start: 4 GPUs x 20 min),
a new queued job that asks for two GPUs preempts it through the reclaim path (its signal,
grace, checkpoint, requeue) and starts on its GPUs. Never a GPU another waiting job's kept
slot needs before the new job ends, at most `max_preemptions` times per job, and only when
the swap pays (the served job would hold its GPUs longer than `PAYS` times the new job's
walltime plus the grace).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from jupyter_gpuhive.jobs.order import LEVELS_GPU_H, level
from jupyter_gpuhive.jobs.queue_inputs import candidates, served
from jupyter_gpuhive.model.jobs import Job
from tests.jobs import test_jobs_queue
from tests.jobs.test_jobs_queue import OWNER, Bed, probe_job
from tests.jobs.test_preemption import _settings, log_text, preemptible, until

users = test_jobs_queue.users
bed = test_jobs_queue.bed

AHEAD = timedelta(minutes=20)  # the scheduler's clock ahead of the jobs' real starts
FOREVER = {"STEPS": "1000000"}  # the worker never finishes by itself


def run_ahead(bed: Bed) -> None:
    bed.scheduler.clock = lambda: datetime.now(UTC) + AHEAD


async def full_host(bed: Bed, host: str) -> int:
    """A plain (not preemptible) job on every GPU of `host`, running."""
    made = await bed.create(probe_job(walltime=timedelta(hours=4)), bed.slots(host, 0, 1, 2, 3))
    return made.id


async def stepping(bed: Bed, job_id: int, step: str = "step 2\n") -> None:
    async def seen() -> bool:
        return step in await log_text(bed, job_id)

    await until(seen)


async def served_on_jq1(bed: Bed, walltime: timedelta) -> tuple[int, Job]:
    """jq2 full of a plain job, a preemptible job of `walltime` on all of jq1, both running;
    then the scheduler's clock runs `AHEAD` (the served job has had 80 GPU-minutes)."""
    other = await full_host(bed, "jq2")
    served_job = await bed.create(preemptible(walltime=walltime, env=FOREVER),
                                  bed.slots("jq1", 0, 1, 2, 3))  # fmt: skip
    report = await bed.tick()
    assert sorted(report.admitted) == sorted([other, served_job.id]), report.waiting
    await stepping(bed, served_job.id)
    run_ahead(bed)
    return other, served_job


async def test_a_new_job_preempts_a_served_job_within_the_bound(bed: Bed) -> None:
    _settings(bed, grace_s=3, max_preemptions=1, least_attained_service=False)
    events: list[dict[str, Any]] = []
    bed.scheduler.preempted = events.append
    other, served_job = await served_on_jq1(bed, timedelta(hours=4))
    had, _ = served(bed.job(served_job.id), bed.scheduler.clock())
    assert had >= 4 * AHEAD.total_seconds() and level(had, 0.0, 0.0) == 1
    new = await bed.create(probe_job(walltime=timedelta(minutes=30), options={"gpu_count": 2}))

    # The site's switch off: the new job waits for a host.
    report = await bed.tick()
    assert report.admitted == [] and "waiting for 2 free GPUs" in report.waiting[new.id]
    assert bed.job(served_job.id).restarts == 0 and report.stopping == {}

    # On: the served job is preempted for it, through the reclaim path.
    _settings(bed, grace_s=3, max_preemptions=1)
    report = await bed.tick()
    assert report.admitted == []
    assert f"job {served_job.id} is being preempted for it" in report.waiting[new.id]
    assert "least attained service" in report.stopping[served_job.id]
    marked = bed.job(served_job.id)
    assert marked.restarts == 1 and [e.kind for e in marked.history] == ["preempted"]
    assert "least attained service" in marked.history[0].detail
    assert "sent SIGTERM, 3 s to checkpoint" in marked.history[0].detail
    assert events == [{"job": served_job.id, "owner": OWNER, "reservation": None,
                       "for_job": new.id, "signal": "SIGTERM", "grace_s": 3.0,
                       "restarts": 1}]  # fmt: skip
    # A second tick (while it checkpoints, or once it stopped) preempts nothing more; the
    # new job still says why it waits, or has started on the freed GPUs.
    report = await bed.tick()
    assert len(events) == 1
    admitted = set(report.admitted)
    assert new.id in admitted or "is being preempted for it" in report.waiting[new.id]

    await bed.scheduler.settle()
    back = bed.job(served_job.id)
    assert back.status == "pending"
    # The bound was reached (max_preemptions 1): the job is told so.
    assert [e.kind for e in back.history] == ["preempted", "exhausted"]
    assert "not preempted again" in back.history[1].detail
    text = await log_text(bed, served_job.id)
    assert "checkpointed at step" in text

    async def started() -> bool:
        admitted.update((await bed.tick()).admitted)
        return new.id in admitted

    await until(started)
    placed = bed.job(new.id)
    assert set(placed.gpus) <= {bed.uuid("jq1", i) for i in range(4)}
    assert len(placed.gpus) == 2
    # What GET jobs shows of the preempted job: one preemption; its service is the run it
    # had (4 GPUs from its start to the preemption, the clock's lead included), all of it
    # counted as lost (gpuhive does not know the last checkpoint).
    shown = back.to_json()
    assert shown["preemptions"] == 1
    assert shown["lost_gpu_h"] >= 4 * AHEAD.total_seconds() / 3600
    assert shown["service_gpu_h"] == shown["lost_gpu_h"]
    # It is back in the queue behind new jobs by the service it had (level 1).
    jobs, _ = bed.store.jobs.schedulable()
    found = candidates(jobs, bed.scheduler.clock(), timedelta(hours=1), attained=True)
    [candidate] = [c for c in found if c.job_id == served_job.id]
    assert candidate.attained >= LEVELS_GPU_H[0] * 3600 and candidate.requeued > 0

    # The new job ends; the preempted job runs again and resumes from its checkpoint.
    await bed.launcher.stop(new.id)

    async def resumed() -> bool:
        return served_job.id in (await bed.tick()).admitted

    await until(resumed)
    await stepping(bed, served_job.id, "resumed from step")
    # Preempted once, the site's bound: another new job waits instead of preempting it.
    again = await bed.create(probe_job(walltime=timedelta(minutes=30), options={"gpu_count": 2}))
    for _ in range(2):
        report = await bed.tick()
        assert again.id in report.waiting and "preempted" not in report.waiting[again.id]
    assert bed.job(served_job.id).status == "running" and bed.job(served_job.id).restarts == 1
    assert len(events) == 1
    await bed.launcher.stop(served_job.id)
    await bed.launcher.stop(other)


async def test_a_kept_slot_is_never_taken_by_a_preemption(bed: Bed) -> None:
    """A waiting job holds a slot on the free GPUs of the served job's host from before the
    new job would end; the new job needs a whole host: the served job runs on, and the slot
    stays where it was. Once the slot's job is gone, the new job preempts the served one."""
    _settings(bed, grace_s=3)
    ahead = timedelta(minutes=40)
    other = (await bed.create(probe_job(walltime=timedelta(hours=1)),
                              bed.slots("jq2", 0, 1, 2, 3))).id  # fmt: skip
    served_job = await bed.create(preemptible(walltime=timedelta(hours=4), env=FOREVER),
                                  bed.slots("jq1", 0, 1))  # fmt: skip
    report = await bed.tick()
    assert sorted(report.admitted) == sorted([other, served_job.id]), report.waiting
    await stepping(bed, served_job.id)
    # 40 minutes ahead: the served job has had 80 GPU-minutes (level 1), `other` on jq2 ends
    # 20 minutes after the scheduler's "now".
    bed.scheduler.clock = lambda: datetime.now(UTC) + ahead
    kept = await bed.create(probe_job(walltime=timedelta(hours=1)), bed.slots("jq1", 2, 3),
                            bed.slots("jq2", 0, 1))  # fmt: skip
    report = await bed.tick()
    slot = bed.scheduler._plan[kept.id]
    assert kept.id in report.waiting and slot.start < bed.scheduler.clock().timestamp() + 1800
    assert set(slot.gpus) >= {bed.uuid("jq1", 2), bed.uuid("jq1", 3)}

    new = await bed.create(probe_job(walltime=timedelta(minutes=30), options={"gpu_count": 4}))
    for _ in range(2):
        report = await bed.tick()
        assert new.id in report.waiting and "preempted" not in report.waiting[new.id]
        assert bed.scheduler._plan[kept.id] == slot  # not moved, not later
    await asyncio.sleep(0.5)
    job = bed.job(served_job.id)
    assert job.status == "running" and job.restarts == 0 and job.history == ()

    # The slot's job leaves the queue: jq1's free GPUs are nobody's, the served job is
    # preempted for the new one (it would hold its GPUs 3 h 20 min more, the new one 30 min).
    await bed.launcher.stop(kept.id)
    report = await bed.tick()
    assert f"job {served_job.id} is being preempted for it" in report.waiting[new.id]
    await bed.scheduler.settle()
    assert bed.job(served_job.id).restarts == 1
    for job_id in (served_job.id, new.id, other):
        await bed.launcher.stop(job_id)


async def test_a_job_near_the_end_of_its_walltime_is_left_to_end(bed: Bed) -> None:
    """A served job is preempted only when the swap pays: it would hold its GPUs longer than
    `PAYS` times the new job's walltime plus the grace. 40 minutes of its walltime left: a new
    30-minute job waits for it, a new 10-minute job preempts it."""
    _settings(bed, grace_s=3)
    # 80 GPU-minutes had (level 1), 40 minutes of its walltime left
    other, served_job = await served_on_jq1(bed, timedelta(hours=1))
    longer = await bed.create(probe_job(walltime=timedelta(minutes=30),
                                        options={"gpu_count": 2}))  # fmt: skip
    for _ in range(2):
        report = await bed.tick()
        assert longer.id in report.waiting and "preempted" not in report.waiting[longer.id]
    assert bed.job(served_job.id).restarts == 0 and report.stopping == {}

    shorter = await bed.create(probe_job(walltime=timedelta(minutes=10),
                                         options={"gpu_count": 2}))  # fmt: skip
    report = await bed.tick()
    assert f"job {served_job.id} is being preempted for it" in report.waiting[shorter.id]
    assert "preempted" not in report.waiting[longer.id]
    await bed.scheduler.settle()
    assert bed.job(served_job.id).restarts == 1
    assert [e.kind for e in bed.job(served_job.id).history] == ["preempted"]
    for job_id in (served_job.id, longer.id, shorter.id, other):
        await bed.launcher.stop(job_id)
