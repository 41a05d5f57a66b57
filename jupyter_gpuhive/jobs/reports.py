"""What the launcher reports: a start, a stop, a sync, and a chunk of a task's log."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.jobs import Job, Task, TaskState


@dataclass(frozen=True)
class StartFailure:
    """A task that did not start, and why (a sentence for people)."""

    task_id: int
    index: int
    host: str
    reason: str

    def describe(self) -> str:
        return f"task {self.index} on {self.host}: {self.reason}"


@dataclass(frozen=True)
class StartReport:
    """What `start` did: the job as it is now, the tasks started and those that failed."""

    job: Job
    started: tuple[int, ...] = ()
    failures: tuple[StartFailure, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def message(self) -> str:
        """One sentence: which tasks failed and why, and what happened to the others."""
        if self.ok:
            return f"Job {self.job.id} started {len(self.started)} task(s)."
        failed = "; ".join(failure.describe() for failure in self.failures)
        running = [t for t in self.job.tasks if t.state == TaskState.RUNNING]
        rest = (
            f" {len(running)} task(s) kept running (partial start)."
            if running
            else " The tasks that had started were stopped."
        )
        return f"Job {self.job.id} did not start: {failed}.{rest}"


@dataclass(frozen=True)
class StopReport:
    """What `stop` did: the job as it is now, and hosts that could not be told to stop."""

    job: Job
    failures: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncReport:
    """Tasks whose state changed (as stored now) and hosts that did not answer."""

    changed: tuple[Task, ...] = ()
    unreachable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LogChunk:
    """Part of a task's log: text from byte `start` to `next_offset` of a file of `size` bytes."""

    text: str
    start: int
    next_offset: int
    size: int

    @property
    def complete(self) -> bool:
        """Whether this chunk reaches the end of the file as it was when read."""
        return self.next_offset >= self.size
