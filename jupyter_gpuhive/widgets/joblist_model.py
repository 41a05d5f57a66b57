"""JobListModel: my jobs with their status, and the log tail of one task, without any widget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..notebook.client import HiveClientError
from ..notebook.magicviews import job_gpus
from .messages import error_text, hosts_notice


@dataclass(frozen=True)
class JobRow:
    """One line of the job list."""

    id: int
    name: str
    status: str
    template: str
    gpus: str
    tasks: int
    queued: bool
    created: str
    preemption: str = ""  # "preemptible", "preemptible, preempted 2×" or ""

    @property
    def label(self) -> str:
        kinds = [k for k in ("queued" if self.queued else "", self.preemption) if k]
        shown = f" ({', '.join(kinds)})" if kinds else ""
        return f"#{self.id} {self.name} — {self.status}{shown} — {self.gpus}"


def preemption_text(job: dict[str, Any]) -> str:
    """'preemptible', with how often it was preempted ('preempted 2×'), or ''."""
    if not job.get("preemptible"):
        return ""
    restarts = int(job.get("restarts") or 0)
    return f"preemptible, preempted {restarts}×" if restarts else "preemptible"


class JobListModel:
    """My jobs with their status, and the log tail of a selected job's task."""

    def __init__(self, client: Any, *, user: str | None = None, tail: int = 4000) -> None:
        self.client = client
        self.user = user
        self.tail = tail
        self.jobs: list[dict[str, Any]] = []
        self.selected: int | None = None
        self.task = 0
        self.log = ""
        self.log_state = ""
        self.attach = ""
        self.error = ""
        self.message = ""
        self.notice = ""  # HTML: the first steps, when there are no hosts
        self.listeners: list[Callable[[], None]] = []

    def refresh(self) -> None:
        """My jobs, newest first, and the log tail of the selected one (a poller's tick)."""
        if self.user is None:
            self.user = str(self.client.request("GET", "me")["name"])
            self.notice = hosts_notice(self.client.request("GET", "hosts"))  # first tick only
        jobs = self.client.request("GET", "jobs", params={"user": self.user})["jobs"]
        self.jobs = sorted(jobs, key=lambda j: j["id"], reverse=True)
        if self.selected is not None and self.job() is None:
            self.selected, self.log, self.attach, self.log_state = None, "", "", ""
        if self.selected is not None:
            self.poll_log()
        self._changed()

    def rows(self) -> list[JobRow]:
        return [
            JobRow(j["id"], j["name"], j["status"], j.get("template", ""),
                   ", ".join(job_gpus(j)), len(j.get("tasks", [])), bool(j.get("queued")),
                   j.get("created_at") or "", preemption_text(j))
            for j in self.jobs
        ]  # fmt: skip

    def job(self, job_id: int | None = None) -> dict[str, Any] | None:
        wanted = self.selected if job_id is None else job_id
        return next((j for j in self.jobs if j["id"] == wanted), None)

    def select(self, job_id: int | None, task: int = 0) -> None:
        """Follow one job's task (its log tail is read now and with every refresh)."""
        self.selected, self.task = job_id, task
        self.log = self.attach = self.log_state = self.error = ""
        if job_id is not None:
            if self.job() is None:
                self.jobs.insert(0, self.client.request("GET", f"jobs/{job_id}"))
            self.poll_log()
        self._changed()

    def poll_log(self) -> str:
        """Re-read the last `tail` bytes of the selected task's log."""
        if self.selected is None:
            return ""
        params = {"task": self.task, "tail": self.tail}
        try:
            chunk = self.client.request("GET", f"jobs/{self.selected}/log", params=params)
        except HiveClientError as error:
            if error.status == 503:  # the host is briefly unreachable: keep what we have
                self.error = error.message
                return self.log
            raise
        self.log = chunk.get("text", "")
        self.log_state = chunk.get("state", "")
        self.attach = chunk.get("attach", "")
        self.error = ""
        return self.log

    def _act(self, verb: str, job_id: int | None) -> dict[str, Any] | None:
        target = self.selected if job_id is None else job_id
        self.error = self.message = ""
        if target is None:
            self.error = f"Choose a job to {verb}."
            self._changed()
            return None
        try:
            if verb == "delete":
                self.client.request("DELETE", f"jobs/{target}")
                job = None
                self.jobs = [j for j in self.jobs if j["id"] != target]
                if self.selected == target:
                    self.selected, self.log, self.attach = None, "", ""
                self.message = f"Job {target} deleted."
            else:
                job = self.client.request("POST", f"jobs/{target}/{verb}")
                self.jobs = [job if j["id"] == target else j for j in self.jobs]
                self.message = f"Job {target} {job['status']}."
        except HiveClientError as error:
            self.error = error_text(error, f"{verb} job {target}")
            job = None
        self._changed()
        return job

    def stop(self, job_id: int | None = None) -> dict[str, Any] | None:
        """Stop a job (SIGINT, then SIGKILL after a grace); the selected one by default."""
        return self._act("stop", job_id)

    def start(self, job_id: int | None = None) -> dict[str, Any] | None:
        return self._act("start", job_id)

    def delete(self, job_id: int | None = None) -> dict[str, Any] | None:
        return self._act("delete", job_id)

    def attach_hint(self) -> str:
        """How to follow the selected job from a terminal or a notebook."""
        if self.selected is None:
            return ""
        parts = [f"%gpujob attach {self.selected}"]
        if self.attach:
            parts.insert(0, self.attach)
        return "  or  ".join(parts)

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()
