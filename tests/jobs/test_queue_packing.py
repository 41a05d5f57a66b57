"""Share jobs in the queue: a job asking `memory` is packed onto shareable GPUs, fullest first,
so that whole GPUs stay free for whole-GPU jobs; two share jobs on one GPU do not make each
other foreign; a real queued share job's tasks carry its caps."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.jobs.admission import Candidate, admit
from jupyter_gpuhive.jobs.queue import candidates, gpu_states
from jupyter_gpuhive.model import Gpu
from jupyter_gpuhive.model.jobs import TaskState
from jupyter_gpuhive.monitor.sampler import Sweep
from tests.jobs.test_jobs_queue_pass import NOW, _stored_job, gpu, job, world

CARD = 81920  # MiB of each simulated card


def share(job_id: int, mib: int, **kwargs: object) -> Candidate:
    shareable = frozenset({"h-0", "h-1", "h-2"})
    return replace(job(job_id, count=1, **kwargs), memory=mib, only=shareable)  # type: ignore[arg-type]


def test_share_jobs_go_onto_the_fullest_gpu_they_fit_and_whole_gpus_stay_free() -> None:
    gpus = world(
        gpu("h", 0, blocker="h:0 runs job 7", share_room=30000),  # share jobs run there
        gpu("h", 1, blocker="h:1 runs job 8", share_room=50000),
        gpu("h", 2, share_room=CARD),  # free and shareable
        gpu("h", 3),  # free, booked whole only
    )
    result = admit([share(1, 20000), share(2, 20000), share(3, 60000), share(4, 20000),
                    job(5, count=1)], gpus, NOW)  # fmt: skip
    placed = {a.job_id: a.gpus for a in result.admitted}
    assert placed[1] == ("h-0",)  # 30000 left there: the fullest that fits
    assert placed[2] == ("h-1",)  # h-0 has 10000 left now
    assert placed[3] == ("h-2",)  # no running GPU has 60000: a free shareable one
    assert placed[4] == ("h-2",)  # 21920 left beside job 3: fuller than h-1's 30000
    assert placed[5] == ("h-3",)  # the whole GPU stayed free for the whole-GPU job


def test_a_share_job_waits_rather_than_take_a_gpu_it_cannot_have() -> None:
    booked_soon = gpu("h", 0, blocker="h:0 runs job 7", share_room=40000, free_until=NOW + 60)
    gpus = world(booked_soon, gpu("h", 3))  # h-3 is free but not shareable
    result = admit([share(1, 20000)], gpus, NOW)
    assert result.admitted == [] and 1 in result.waiting


def test_gpu_states_give_room_beside_share_jobs_and_none_beside_whole_ones() -> None:
    now = datetime.fromtimestamp(NOW, UTC)
    inv = [Gpu(i + 1, "h", i, f"h-{i}", memory_mib=CARD, shareable=i < 3) for i in range(4)]
    a = _stored_job(1, "ann", "h", ["h-0"], state=TaskState.RUNNING, pgid=500, queued=True,
                    options={"gpu_count": 1, "memory": "20G"})  # fmt: skip
    b = _stored_job(2, "bob", "h", ["h-0"], state=TaskState.RUNNING, pgid=600, queued=True,
                    options={"gpu_count": 1, "memory": "30G"})  # fmt: skip
    whole = _stored_job(3, "cy", "h", ["h-1"], state=TaskState.RUNNING, pgid=700)
    procs = (
        ProcessInfo(501, "h-0", "ann", "python", 20000, 500),
        ProcessInfo(601, "h-0", "bob", "python", 30000, 600),  # not foreign to ann's job
        ProcessInfo(701, "h-1", "cy", "python", 100, 700),
    )
    sweep = Sweep(now, 5.0, {"h": HostSample("h", now, processes=procs)}, {})
    states = gpu_states(inv, {}, [a, b, whole], sweep, now)
    assert states["h-0"].blocker in ("h:0 runs job 1", "h:0 runs job 2")
    assert states["h-0"].share_room == CARD - 50 * 1024
    assert states["h-1"].share_room is None  # a whole-GPU job runs there
    assert states["h-2"].share_room == CARD and states["h-2"].blocker is None
    assert states["h-3"].share_room is None  # not shareable
    # A stranger's process on the shared GPU closes it to share jobs.
    eve = ProcessInfo(801, "h-0", "eve", "python", 10, 800)
    sweep = Sweep(now, 5.0, {"h": HostSample("h", now, processes=(*procs, eve))}, {})
    assert gpu_states(inv, {}, [a, b, whole], sweep, now)["h-0"].share_room is None


def test_a_queued_job_asking_memory_is_a_share_job_on_shareable_gpus_only() -> None:
    now = datetime.fromtimestamp(NOW, UTC)
    inv = {f"h-{i}": Gpu(i + 1, "h", i, f"h-{i}", memory_mib=CARD, shareable=i < 2)
           for i in range(3)}  # fmt: skip
    pending = _stored_job(4, "ann", "h", [], queued=True, walltime=timedelta(hours=1),
                          options={"gpu_count": 1, "memory": "20G"})  # fmt: skip
    whole = _stored_job(5, "ann", "h", [], queued=True, walltime=timedelta(hours=1),
                        options={"gpu_count": 1})  # fmt: skip
    found = {c.job_id: c for c in candidates([pending, whole], now, timedelta(hours=1),
                                              inventory=inv)}  # fmt: skip
    assert found[4].memory == 20480 and found[4].only == frozenset({"h-0", "h-1"})
    assert found[5].memory is None and found[5].only is None
