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
from ..model.jobs import Job, Task
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


async def no_hold(_task: Task) -> tuple[str, datetime] | None:
    """The launcher's `hold_of` until the Jobs service sets it: no reservation."""
    return None


class EngineStarts:
    """When a batch system (Slurm) expects to start the tasks that wait in its queue, as the
    launcher's last `sync` saw (by task id)."""

    def __init__(self) -> None:
        self._by_task: dict[int, datetime] = {}

    def note(self, task: Task, at: datetime | None) -> None:
        """Remember a task's expected start (None: it waits no more, or Slurm does not say)."""
        if at is None:
            self._by_task.pop(task.id, None)
        else:
            self._by_task[task.id] = at

    def of(self, job: Job) -> datetime | None:
        """When the last of the job's waiting tasks is expected to start (None: unknown)."""
        known = [at for t in job.tasks if t.active and (at := self._by_task.get(t.id))]
        return max(known) if known else None
