"""The templates' `resume` option end to end: a pytorch-template job that checkpoints with the
shipped `gpuhive_checkpoint` module, run by the real launcher in screen as the real test user
on a simulated host (through its environment file), is reclaimed, requeued and resumed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from jupyter_gpuhive.jobs.preemption import PreemptionSettings
from jupyter_gpuhive.store import Changes
from tests.jobs import test_jobs_queue
from tests.jobs.test_jobs_queue import OTHER, Bed, queued
from tests.jobs.test_preemption import book

users = test_jobs_queue.users
bed = test_jobs_queue.bed

STEPS = 40
# The host's own python3 imports the helper that came with the task; nothing else of gpuhive.
WORKER = f"""\
import sys, time
from gpuhive_checkpoint import Checkpoint
ckpt = Checkpoint()
state = ckpt.resume({{"step": 0, "total": 0}})
print("start", state["step"], "restarts", ckpt.restarts, "every", ckpt.every, flush=True)
while state["step"] < {STEPS}:
    time.sleep(0.1)
    state["total"] += state["step"]
    state["step"] += 1
    print("step", state["step"], flush=True)
    ckpt.step(state)
print("result", state["total"], flush=True)
"""


async def _until(check: Any, seconds: float = 30) -> None:
    async with asyncio.timeout(seconds):
        while not await check():
            await asyncio.sleep(0.1)


async def test_a_resume_job_saves_on_the_signal_and_resumes_through_the_launcher(
    bed: Bed,
) -> None:
    bed.scheduler.preemption = PreemptionSettings(grace_s=5, watch_interval=0.2)
    bed.launcher.preemption = bed.scheduler.preemption
    rid = book(bed, OTHER, "jq2", 2, datetime.now(UTC) - timedelta(minutes=1))
    spec = queued("python3 -c {worker}", variables={"worker": WORKER}, preemptible=True,
                  preempt_signal="SIGUSR2", template="pytorch",
                  options={"mode": "env", "resume": True, "checkpoint_every": 25})  # fmt: skip
    made = await bed.create(spec, bed.slots("jq2", 2))
    assert (await bed.tick()).admitted == [made.id]

    async def text() -> str:
        return (await bed.launcher.log(bed.job(made.id).tasks[0])).text

    async def stepping() -> bool:
        return "step 8\n" in await text()

    await _until(stepping)
    assert "start 0 restarts 0 every 25\n" in await text()
    jobs, _ = await bed.scheduler.reclaim_reservation(rid, "the holder asked")
    assert jobs == [made.id]
    await bed.scheduler.settle()
    assert bed.job(made.id).status == "pending" and bed.job(made.id).restarts == 1
    stopped_at = max(int(line.split()[1]) for line in (await text()).splitlines()
                     if line.startswith("step "))  # fmt: skip
    assert 8 <= stopped_at < 25  # before the first periodic save: only the signal's save

    # The holder gives the booking up: the job resumes on the free GPU.
    cancelled = Changes(cancelled_at=datetime.now(UTC))
    await asyncio.to_thread(bed.store.reservations.modify, rid, lambda _: cancelled)

    async def resumed() -> bool:
        return made.id in (await bed.tick()).admitted

    await _until(resumed)

    async def finished() -> bool:
        await bed.launcher.sync()
        return bed.job(made.id).status in ("succeeded", "failed")

    await _until(finished)
    final = await text()
    assert bed.job(made.id).status == "succeeded", final
    assert f"start {stopped_at} restarts 1 every 25\n" in final  # no finished step was lost
    assert f"result {sum(range(STEPS))}\n" in final
