"""Jobs and tasks as stored: value types, task states, the job status derived from them, and
the names (its name on its host, log files) a task gets when it is stored.

The job status sets (ACTIVE, FINAL, LIVE) are defined here once; TaskState is a StrEnum, so
plain status strings from the API compare equal to its members.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .containers import ContainerSpec
from .core import isoformat, utcnow

DEFAULT_LOG_DIR = "~/.gpuhive/jobs"
MASK = "••••"  # every stored env value reads like this, whatever its length
SESSION_PREFIX = "gpuhive"
SESSION_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# A task's name names its run on the host (a screen session, whose socket path
# /run/screen/S-user/PID.NAME must fit in a UNIX socket address; a container).
MAX_JOB_PART = 40


def masked(env: Mapping[str, str], names: Collection[str] | None = None) -> dict[str, str]:
    """The env with the values of `names` (all when None) replaced by MASK."""
    return {key: MASK if names is None or key in names else value for key, value in env.items()}


def session_name(job_name: str, task_index: int) -> str:
    """`gpuhive-<job>-<task>` with only [A-Za-z0-9_.-]; a name that had to change gets a hash."""
    part = _UNSAFE.sub("_", job_name).strip("._-")[:MAX_JOB_PART] or "job"
    if part != job_name:
        part += "." + hashlib.sha256(job_name.encode()).hexdigest()[:8]
    return f"{SESSION_PREFIX}-{part}-{int(task_index)}"


# The signals a preemptible job may ask for on reclaim (SIGKILL/SIGSTOP cannot be handled).
PREEMPT_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")


@dataclass(frozen=True)
class JobEvent:
    """One entry of a job's history: `preempted`, `resumed` or `exhausted` (preempted too
    often: it runs in unbooked time only from then on)."""

    at: datetime
    kind: str
    detail: str
    reservation: int | None = None
    gpu_s: float | None = None  # `preempted`: the GPU-seconds its run had had (None: not known)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": isoformat(self.at),
            "event": self.kind,
            "reservation": self.reservation,
            "detail": self.detail,
            "gpu_h": gpu_hours(self.gpu_s),
        }


def gpu_hours(gpu_s: float | None) -> float | None:
    return None if gpu_s is None else round(gpu_s / 3600, 6)


@dataclass(frozen=True)
class Loan:
    """GPUs of a reservation lent to a preemptible job; open while `ended_at` is None, being
    reclaimed (the job signalled, its grace running) once `reclaimed_at` is set."""

    id: int
    job_id: int
    reservation_id: int
    gpus: tuple[str, ...]
    since: datetime
    reclaimed_at: datetime | None = None
    reclaim_reason: str | None = None
    ended_at: datetime | None = None


class TemplateError(ValueError):
    """A job template, its variables, options or sweep specification is invalid."""


@dataclass(frozen=True)
class GpuSlot:
    """One GPU (or MIG device) a job holds: its host, the host's address, index and UUID."""

    host: str
    address: str
    index: int
    uuid: str


@dataclass(frozen=True)
class TaskSpec:
    """One fully resolved task: the shell command and environment to run on one host.

    `command` is shell text (the user's own code, run as the user); every value substituted
    into it is already shell-quoted. `env` holds verbatim values that a launcher must quote.
    The vendor's pinning variable in `env` always lists the UUIDs of `gpus`, in order.
    """

    host: str
    address: str
    gpus: tuple[GpuSlot, ...]
    command: str
    env: dict[str, str]
    variables: dict[str, str]
    job: str = ""
    index: int = 0
    role: str = "task"
    workdir: str | None = None

    @property
    def visible_devices(self) -> str:
        """The pinning variable's value for this task's GPUs (UUIDs, comma separated)."""
        return ",".join(gpu.uuid for gpu in self.gpus)


class TaskState(StrEnum):
    """Where a task is in its life; the launcher moves it, `sync` confirms it."""

    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPING = "stopping"
    STOPPED = "stopped"
    LOST = "lost"


# A task in one of these may have a run (its runner's) on its host.
ACTIVE = frozenset({TaskState.STARTING, TaskState.RUNNING, TaskState.STOPPING})
FINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.LOST})
# A job (or task) in one of these has not finished yet.
LIVE = frozenset({TaskState.PENDING, *ACTIVE})
RECENT_JOBS = 200  # GET jobs: the newest jobs shown besides every job running now


@dataclass(frozen=True)
class Task:
    """One task of a job: a command on one host with its GPUs, run as the owner by the host's
    task runner. `session` is its name on the host (unique there: the runner's name of its run,
    its container's); `handle` is what the runner knows its run by (screen: the session's pid),
    `pgid` the process group its signals go to."""

    id: int
    job_id: int
    index: int
    owner: str
    host: str
    address: str
    role: str
    gpus: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    command: str
    env: dict[str, str]
    workdir: str | None
    variables: dict[str, str]
    session: str
    log_path: str
    exit_path: str
    state: TaskState = TaskState.PENDING
    exit_status: int | None = None
    handle: int | None = None
    pgid: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_error: str | None = None
    container: ContainerSpec | None = None  # the job's, when it runs in an image

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def spec(self) -> TaskSpec:
        """The TaskSpec the command builders take (`commands.task_script`)."""
        slots = tuple(
            GpuSlot(self.host, self.address, index, uuid)
            for index, uuid in zip(self.gpu_indices, self.gpus, strict=True)
        )
        return TaskSpec(
            host=self.host,
            address=self.address,
            gpus=slots,
            command=self.command,
            env=dict(self.env),
            variables=dict(self.variables),
            index=self.index,
            role=self.role,
            workdir=self.workdir,
        )

    def to_json(
        self, *, detail: bool = False, secret: Collection[str] | None = None
    ) -> dict[str, Any]:
        """The task as JSON: where and how it runs; with `detail` (its owner, admins) also
        its command, environment and files, the values of `secret` env names masked (None:
        every value)."""
        data: dict[str, Any] = {
            "id": self.id,
            "job": self.job_id,
            "index": self.index,
            "owner": self.owner,
            "host": self.host,
            "role": self.role,
            "gpus": list(self.gpus),
            "gpu_indices": list(self.gpu_indices),
            "state": str(self.state),
            "exit_status": self.exit_status,
            "started_at": isoformat(self.started_at),
            "ended_at": isoformat(self.ended_at),
        }
        if detail:
            data.update(
                command=self.command,
                env=masked(self.env, secret),
                workdir=self.workdir,
                session=self.session,
                log_path=self.log_path,
                last_error=self.last_error,
            )
        return data


@dataclass(frozen=True)
class Job:
    """A job: its definition and, once stored, its id, tasks and history (`id` 0 before).

    `status` is derived from the tasks' states; the store's `create` takes an unstored one.
    """

    name: str
    owner: str
    command: str
    template: str = "plain"
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)
    sweep: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    queued: bool = False
    walltime: timedelta | None = None
    start_at: datetime | None = None
    stop_at: datetime | None = None
    max_retries: int = 0
    container: ContainerSpec | None = None  # runs in an image (issue #29)
    preemptible: bool = False
    preempt_signal: str = "SIGTERM"
    grace_s: int | None = None  # None: the site's preemption grace
    id: int = 0
    attempts: int = 0
    restarts: int = 0  # times preempted
    lent_from: int | None = None  # the reservation whose GPUs it runs on now
    history: tuple[JobEvent, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None
    updated_by: str | None = None
    tasks: tuple[Task, ...] = ()

    @property
    def status(self) -> TaskState:
        """pending, starting, running, stopping, succeeded, failed, stopped or lost.

        A job that names only a GPU count has no tasks until the queue places it; taken out
        of the queue before that (stopped), it is stopped."""
        if not self.tasks and not self.queued and "gpu_count" in self.options:
            return TaskState.STOPPED
        return job_status(task.state for task in self.tasks)

    @property
    def gpus(self) -> tuple[str, ...]:
        """UUIDs of every GPU the job's tasks use, in task order, without repeats."""
        return tuple(dict.fromkeys(uuid for task in self.tasks for uuid in task.gpus))

    def preemption_cost(self, now: datetime) -> dict[str, Any]:
        """How often the job was preempted, the service it has had and the work it lost.

        `lost_gpu_h`: at each preemption, the GPU-hours its run had had since it started
        (gpuhive does not know when a job last checkpointed, so this is the most it lost);
        `service_gpu_h`: those runs and the current one so far. Both None for a job never
        preempted, or one preempted before gpuhive counted this."""
        preempted = [e for e in self.history if e.kind == "preempted"]
        counted = [e.gpu_s for e in preempted if e.gpu_s is not None]
        if not preempted or len(counted) < len(preempted):
            return {"preemptions": len(preempted), "service_gpu_h": None, "lost_gpu_h": None}
        since = preempted[-1].at  # the current run's tasks started after the last one
        current = sum(
            len(t.gpus) * max(0.0, ((t.ended_at or now) - t.started_at).total_seconds())
            for t in self.tasks
            if t.started_at is not None and t.started_at > since
        )
        return {
            "preemptions": len(preempted),
            "service_gpu_h": gpu_hours(sum(counted) + current),
            "lost_gpu_h": gpu_hours(sum(counted)),
        }

    def to_json(self, *, detail: bool = False, description: bool = False) -> dict[str, Any]:
        """The job as JSON. Everyone may see the summary (who, where, when, status); with
        `detail` (the owner, admins) also its definition, env values masked (write-only).
        `description` shows the description without `detail`."""
        data: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "owner": self.owner,
            "template": self.template,
            "queued": self.queued,
            "walltime_s": self.walltime.total_seconds() if self.walltime else None,
            "start_at": isoformat(self.start_at),
            "stop_at": isoformat(self.stop_at),
            "max_retries": self.max_retries,
            "attempts": self.attempts,
            "preemptible": self.preemptible,
            "preempt_signal": self.preempt_signal,
            "grace_s": self.grace_s,
            "restarts": self.restarts,
            "lent_from": self.lent_from,
            "history": [event.to_json() for event in self.history],
            **self.preemption_cost(utcnow()),
            "created_at": isoformat(self.created_at),
            "updated_at": isoformat(self.updated_at),
            "updated_by": self.updated_by,
            "status": str(self.status),
            "gpus": list(self.gpus),
            "detail": detail,
        }
        if detail or description:
            data["description"] = self.description
        if detail:
            data.update(
                command=self.command,
                options=dict(self.options),
                variables=dict(self.variables),
                sweep={name: list(values) for name, values in self.sweep.items()},
                env=masked(self.env),
                workdir=self.workdir,
                container=self.container.to_json() if self.container else None,
            )
        data["tasks"] = [task.to_json(detail=detail, secret=self.env) for task in self.tasks]
        return data


def job_status(states: Iterable[TaskState]) -> TaskState:
    """A job's status: the most pressing active state, else the worst outcome of its tasks."""
    seen = set(states)
    for state in (TaskState.STOPPING, TaskState.STARTING, TaskState.RUNNING):
        if state in seen:
            return state
    if not seen or seen == {TaskState.PENDING}:
        return TaskState.PENDING
    for state in (TaskState.FAILED, TaskState.LOST, TaskState.STOPPED, TaskState.PENDING):
        if state in seen:
            return state
    return TaskState.SUCCEEDED


def task_session(job_id: int, job_name: str, index: int) -> str:
    """The task's name on its host: `gpuhive-<id>-<name>-<index>` (the id keeps it unique)."""
    return session_name(f"{job_id}-{job_name}", index)


_LOG_DIR = re.compile(r"(/|~/)[^\0]*\Z")


def task_paths(log_dir: str, owner: str, job_id: int, index: int, tag: str = "") -> tuple[str, str]:
    """Log and exit file of a task on its host; `~/` is the owner's home, `{user}` the owner.

    `tag` (random per job) keeps jobs of two stores that share an id from sharing a log.
    """
    directory = log_dir.replace("{user}", owner).rstrip("/")
    if not _LOG_DIR.match(directory + "/"):
        raise TemplateError(f"job log directory {log_dir!r} must be absolute or start with ~/")
    base = f"{directory}/{job_id}-{tag}-{index}" if tag else f"{directory}/{job_id}-{index}"
    return f"{base}.log", f"{base}.exit"
