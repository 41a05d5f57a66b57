"""Share jobs in the queue: packed onto shareable GPUs, fullest first, so whole GPUs stay free.

A queued job that asks for `memory` (a share of one shareable GPU) first goes onto a GPU
that already runs share jobs only and still has that much room, taking the one with the least
room left that fits (the fullest). Only when none has room does it take a free shareable GPU,
as a one-GPU job would, and that GPU's remaining room is then offered to the share jobs after
it in the same pass. A share job never goes onto a GPU that a booking takes before it ends,
nor one the owner may not use. Pure: the pass's plan in, the chosen GPU out.
"""

from __future__ import annotations

from .plan import AccessCheck, Candidate, GpuState, Plan
from .timeline import EPS


def place(plan: Plan, job: Candidate, access: AccessCheck | None) -> list[GpuState] | None:
    """The GPU already running share jobs that fits `job` and has the least room left (its
    room taken), or None: none fits."""
    need = job.memory or 0
    fits: list[tuple[int, str, int, GpuState]] = []
    for uuid, room in plan.rooms.items():
        gpu = plan.gpus[uuid]
        if room < need or gpu.free_until < job.end - EPS:
            continue
        if job.only is not None and uuid not in job.only:
            continue
        if access is not None and not access.allows(job.owner, uuid, job.end):
            continue
        fits.append((room, gpu.host, gpu.index, gpu))
    if not fits:
        return None
    room, _host, _index, gpu = min(fits, key=lambda f: f[:3])
    plan.rooms[gpu.uuid] = room - need
    return [gpu]


def opened(plan: Plan, job: Candidate, chosen: list[GpuState]) -> None:
    """A share job took a free shareable GPU: the room it leaves is for the next share jobs."""
    if job.memory is None or len(chosen) != 1 or chosen[0].share_room is None:
        return
    plan.rooms[chosen[0].uuid] = max(0, chosen[0].share_room - job.memory)
