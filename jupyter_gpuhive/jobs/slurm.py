"""Jobs on Slurm nodes (issue #47): which of gpuhive's bookings holds a task's GPUs, as the
engine reservation its batch job runs in (`sbatch --reservation=gpuhive-N`).

The Slurm task runner (`hosts/runners/slurm.py`) submits, follows and cancels each task as a
batch job of its owner; the launcher asks `hold_of` for the reservation and its end (the
job's time limit: Slurm starts no job in a reservation that would outlast it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from ..model import utcnow
from ..model.engines import engine_name
from ..model.jobs import Task
from ..store import Store


async def hold_of(
    store: Store, run: Callable[..., Awaitable[Any]], task: Task
) -> tuple[str, datetime] | None:
    """The engine reservation (name, end) of the owner's booking that holds every GPU of
    `task` now; None when none does (the job then waits in Slurm's own queue)."""
    now = utcnow()
    found = await run(store.reservations.window, now, now + timedelta(seconds=1),
                      owner=task.owner)  # fmt: skip
    wanted = set(task.gpus)
    for res in found:
        if res.cancelled or res.start > now or res.end <= now:
            continue
        if wanted <= {gpu.uuid for gpu in res.gpus}:
            return engine_name(res.id), res.end
    return None
