"""The main answers, as the OpenAPI document states them (and schemathesis checks them).

The domain builds these objects itself (`to_json`, `privacy`); the models say what a client
may rely on: the fields listed are always there unless marked optional, and an answer may
hold more. A test checks real answers against them.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ....model import ReservationStatus
from ....model.jobs import TaskState


class Reply(BaseModel):
    """An answer's documented part; answers may carry more fields."""

    model_config = ConfigDict(extra="allow")


class ErrorReply(Reply):
    """Every error: one sentence that says what is wrong (and, for some, details)."""

    message: str
    conflicts: list[dict[str, Any]] | None = Field(
        None, description="409 on a booking: each reservation in the way, per GPU"
    )


class IdentityReply(Reply):
    name: str
    groups: list[str]
    admin: bool


class LentTo(Reply):
    job: int
    name: str
    owner: str
    preemptible: bool


class JobEventReply(Reply):
    at: datetime
    event: str = Field(description="preempted, resumed or exhausted (no more borrowing)")
    reservation: int | None
    detail: str
    gpu_h: float | None = Field(
        None, description="A preemption's GPU-hours its run had had (null: not known)"
    )


class ReclaimReply(Reply):
    reclaimed: list[int] = Field(description="The jobs signalled (or on their way out)")
    free_by: datetime = Field(description="When the GPUs are free at the latest")


class ReservationReply(Reply):
    id: int
    owner: str
    title: str
    description: str | None = Field(
        None, description="Shown to the owner and admins (or everyone, if the site says so)"
    )
    start: datetime
    end: datetime
    gpus: list[str] = Field(
        description="'host:index' of each GPU, 'host:index/migGI' of each MIG slice"
    )
    gpu_uuids: list[str]
    created_at: datetime
    cancelled_at: datetime | None
    status: ReservationStatus
    flagged: bool
    flag_reason: str | None
    hosts_gone: list[str] = Field(
        default_factory=list,
        description="Hosts of its GPUs that are no longer configured (removed from the hosts "
        "file or the configuration): those GPUs are not monitored and cannot run kernels",
    )
    lend: bool = Field(True, description="Whether preemptible jobs may use its idle GPUs")
    reclaim_before_start: bool = False
    lent_to: list[LentTo] = Field(
        default_factory=list, description="Preemptible jobs that run on its GPUs now"
    )
    share: float = Field(
        1.0, description="The share of its one GPU it holds (1: whole GPUs; a share is of one GPU)"
    )
    share_memory_mib: int | None = Field(
        None,
        description="The GPU memory its share holds, in MiB (null: whole GPUs, or the "
        "GPU's memory is unknown)",
    )
    tentative: bool = Field(
        False,
        description="It waits for an administrator's approval: its slot is held, but no job "
        "or kernel may run on it until it is approved (docs/how-to/approvals.md)",
    )
    tentative_until: datetime | None = Field(
        None, description="While tentative: when its hold ends if nobody answers (released)"
    )
    may_approve: bool = Field(
        False, description="While tentative: whether the requester may approve or decline it"
    )


class ReservationList(Reply):
    reservations: list[ReservationReply]


class WindowReply(Reply):
    days: list[str]
    start: str
    end: str


class RuleReply(Reply):
    id: int | None
    name: str
    users: list[str]
    groups: list[str]
    hosts: list[str]
    gpus: list[str]
    windows: list[WindowReply]
    valid_from: date | None
    valid_until: date | None


class RuleChanged(RuleReply):
    flag_changes: dict[str, str | None] = Field(
        description="Reservations (by id) whose flag changed: the new reason, or null"
    )


class RuleList(Reply):
    rules: list[RuleReply]


class RuleDeleted(Reply):
    deleted: int
    flag_changes: dict[str, str | None]


class TaskReply(Reply):
    id: int
    job: int
    index: int
    owner: str
    host: str
    role: str
    gpus: list[str] = Field(description="GPU UUIDs")
    gpu_indices: list[int]
    state: TaskState
    exit_status: int | None
    started_at: datetime | None
    ended_at: datetime | None


class JobReply(Reply):
    """A job: its definition (command, options, ...) only for the owner and admins."""

    id: int
    name: str
    owner: str
    template: str
    queued: bool
    walltime_s: float | None
    start_at: datetime | None
    stop_at: datetime | None
    max_retries: int
    attempts: int
    preemptible: bool = False
    preempt_signal: str = "SIGTERM"
    grace_s: int | None = None
    restarts: int = Field(0, description="Times preempted (GPUHIVE_RESTARTS)")
    lent_from: int | None = Field(None, description="The reservation whose GPUs it runs on")
    history: list[JobEventReply] = Field(default_factory=list)
    preemptions: int = Field(0, description="Times preempted ('preempted' events)")
    service_gpu_h: float | None = Field(
        None,
        description="A preempted job's service so far: the GPU-hours of its tasks' runs, those "
        "preempted and the current one (null: never preempted, or not known)",
    )
    lost_gpu_h: float | None = Field(
        None,
        description="The work a preempted job lost: at each preemption the GPU-hours its run had "
        "had since it started (gpuhive does not know the job's last checkpoint, so this is the "
        "most it lost; null: never preempted, or not known)",
    )
    status: TaskState
    gpus: list[str]
    detail: bool = Field(description="Whether the definition is shown")
    tasks: list[TaskReply]
    place: int | None = Field(
        None, description="A waiting queued job's place in the queue's order (1: next)"
    )
    waiting_for: str | None = Field(None, description="Why a waiting queued job waits")
    estimated_start: datetime | None = Field(
        None,
        description="A waiting queued job's projected start, as GET queue gives it (an "
        "estimate; None: not known, or not a waiting queued job)",
    )


class QueuedJobReply(JobReply):
    """A waiting queued job with its projected start."""


class QueueList(Reply):
    jobs: list[QueuedJobReply]


class JobList(Reply):
    jobs: list[JobReply]
    more: bool = Field(False, description="Whether older jobs were left out ('limit')")


class PreviewTask(Reply):
    index: int
    host: str
    gpus: list[str]
    role: str
    env: dict[str, str]
    command: str
    shell: str = Field(description="The exact command line run on the host")


class Preview(Reply):
    tasks: list[PreviewTask]


class Deleted(Reply):
    deleted: int | bool


REPLIES: tuple[type[Reply], ...] = (
    ErrorReply,
    IdentityReply,
    ReservationReply,
    ReservationList,
    RuleReply,
    RuleChanged,
    RuleList,
    RuleDeleted,
    JobReply,
    JobList,
    Preview,
    Deleted,
)
