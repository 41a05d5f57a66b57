"""The launcher: runs a job's tasks as their owner through each host's task runner (GNU screen
unless the host's backend brings another, `hosts/runners/`), follows, stops and reads them.

Every host command goes through the HostPool as the task owner's UNIX account (`unix_user`:
the site's `unix_users`; the runs, and the log, exit and environment files, belong to that
account; only it can read the files). `sync`
is for the background loop, never for an API request: it costs one command per (host, owner)
for all of their active tasks.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import logging
import shlex
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..errors import Conflict
from ..hosts.backends import DEFAULT_RUNNER
from ..hosts.environment import host_env
from ..hosts.pool import CommandResult, HostPool, HostUnavailable
from ..hosts.runners import RunnerError, Shell, Stopping, TaskRunner, TaskStart, Watched
from ..model import utcnow
from ..model.jobs import ACTIVE, FINAL, Job, Task, TaskState
from ..store.jobs import Jobs, TaskChange
from . import commands, containers, scripts
from .outcomes import apply_change, observe, to_int
from .outcomes import tail as output_tail  # `tail` is also log()'s parameter
from .preemption import PreemptionSettings, env_lines
from .reports import LogChunk, StartFailure, StartReport, StopReport, SyncReport
from .slurm import EngineStarts, Placer, no_hold, no_place
from .tasks import TemplateError

ENDED_MEMORY = timedelta(minutes=10)

log = logging.getLogger(__name__)
T = TypeVar("T")

KILL_PATIENCE = 3.0  # seconds between SIGTERM and SIGKILL


class Launcher:
    """Starts, follows and stops jobs on their hosts; writes every state change to `jobs`."""

    def __init__(
        self,
        pool: HostPool,
        jobs: Jobs,
        *,
        grace: float = 10.0,
        timeout: float = 30.0,
        log_limit: int = 1 << 20,
        changed: Callable[[int], Any] = lambda _job_id: None,
        unix_user: Callable[[str], str] = lambda name: name,
    ) -> None:
        self.pool = pool
        self.unix_user = unix_user  # gpuhive user -> the UNIX account their tasks run as
        self.jobs = jobs
        self._changed = changed  # told each job id whose tasks this launcher moved
        self.grace = grace
        self.timeout = timeout
        self.log_limit = log_limit
        self._locks: dict[int, asyncio.Lock] = {}
        # (host, process group) of each task seen to end, and when: a sweep taken before that
        # may still show its processes, which are then no one else's (see queue_inputs).
        self.ended_groups: dict[tuple[str, int], datetime] = {}
        # (host, GPU) of each such task, and when: a process that left before the probe read
        # its owner has no process group, only the GPU it was listed on.
        self.ended_gpus: dict[tuple[str, str], datetime] = {}
        # Preemptible jobs: their tasks' variables, and what a start waits for first (the
        # Scheduler reclaims GPUs lent to others there: the holder's claim wins).
        self.preemption = PreemptionSettings()
        self.before_start: Callable[[Job], Awaitable[None]] = _nothing
        # For a host whose backend `submits_tasks` (Slurm): how to submit a task (TaskStart's
        # gpu_count, hold, until, anywhere; set by the Jobs service: `slurm.hold_of`).
        self.hold_of: Callable[[Task], Awaitable[dict[str, Any]]] = no_hold
        self.engine_starts = EngineStarts()  # of tasks in a batch system's queue (Slurm's)
        # Records the node and GPUs (node, IDX) its engine's queue gave an unplaced task.
        self.place: Placer = no_place

    # --- starting -------------------------------------------------------------------

    async def start(
        self, job: Job | int, *, partial_ok: bool = False, only_pending: bool = False
    ) -> StartReport:
        """Start every task; if one fails, stop the others (unless `partial_ok`) and say why.

        `only_pending` (the queue's admissions): start only tasks still pending, so that a job
        its owner stopped after the queue chose it stays stopped."""
        job_id = job if isinstance(job, int) else job.id
        async with self._lock(job_id):
            current = await _db(self.jobs.get, job_id)
            if not current.tasks:
                raise Conflict(f"Job {job_id} has no tasks to start.")
            busy = [t for t in current.tasks if t.active]
            if busy:
                listed = ", ".join(f"task {t.index} is {t.state}" for t in busy)
                raise Conflict(f"Job {job_id} is already running ({listed}).")
            claims = [
                TaskChange(t.id, TaskState.STARTING, exit_status=None, handle=None,
                           pgid=None, started_at=None, ended_at=None, last_error=None)
                for t in current.tasks
            ]  # fmt: skip
            claimable = {TaskState.PENDING} if only_pending else {TaskState.PENDING, *FINAL}
            claimed = await _db(self.jobs.change_tasks, claims, claimable)
            if len(claimed) != len(claims):
                back = [TaskChange(i, TaskState.PENDING) for i in claimed]
                await _db(self.jobs.change_tasks, back, {TaskState.STARTING})
                raise Conflict(f"Job {job_id} changed while it was being started; try again.")
            await self.before_start(current)
            account = self.unix_user(current.owner)
            extra = env_lines(current, self.preemption, self.jobs.log_dir, account)
            outcomes = await asyncio.gather(
                *(self._start_task(t, account, extra) for t in current.tasks)
            )
            now = utcnow()
            started: list[Task] = []
            failures: list[StartFailure] = []
            changes: list[TaskChange] = []
            for task, outcome in zip(current.tasks, outcomes, strict=True):
                if isinstance(outcome, str):
                    failures.append(StartFailure(task.id, task.index, task.host, outcome))
                    changes.append(
                        TaskChange(task.id, TaskState.FAILED, ended_at=now, last_error=outcome)
                    )
                else:
                    started.append(task)
                    changes.append(replace(outcome, started_at=now))
            await _db(self.jobs.change_tasks, changes, {TaskState.STARTING})
            if failures and started and not partial_ok:
                first = failures[0].describe()
                fresh = await _db(self.jobs.tasks, None, job_id=job_id)
                await self._stop_tasks(
                    [t for t in fresh if t.active], self.grace, f"stopped because {first}"
                )
            self._changed(job_id)
            return StartReport(
                await _db(self.jobs.get, job_id),
                tuple(t.id for t in started),
                tuple(failures),
            )

    async def _start_task(self, task: Task, account: str, extra_env: str = "") -> TaskChange | str:
        """Start one task through its host's runner as `account`; its new state, or why not."""
        log_path = scripts.host_path(task.log_path)
        exit_path = scripts.host_path(task.exit_path)
        log_dir = log_path.rsplit("/", 1)[0] or "/"
        env_path = commands.env_path(exit_path)
        decl = self.pool.hosts.get(task.host)
        runner = self._runner(task.host)
        # A backend that starts clean (local) starts the task from an empty environment plus
        # its own; over SSH the host's login environment is the base (sshd builds it).
        clean = decl is None or self.pool.backend_of(decl).clean_start
        keep = runner.kept_names
        try:
            if task.container is not None:  # the engine's run as the task's script
                paths = (log_path, exit_path, env_path)
                body, env_text = containers.start_line(
                    task, decl, paths, account, clean=clean, keep=keep, extra_env=extra_env
                )
            else:
                spec = task.spec()
                body = commands.task_script(
                    spec, log_path, exit_path, env_path, clean=clean, keep=keep
                )
                env_text = commands.env_file(spec, host_env(decl) if decl else None) + extra_env
            launch = TaskStart(task.session, body, log_dir, log_path, exit_path, env_path,
                               env_text, task.host, account)  # fmt: skip
            if decl is not None and self.pool.backend_of(decl).submits_tasks:
                launch = replace(launch, **await self.hold_of(task))  # how to submit it
            done = await runner.start(self._shell(task.host, task.owner), launch)
        except (TemplateError, RunnerError) as error:
            return str(error)
        except HostUnavailable as error:
            return f"host unavailable: {error.reason}"
        code = done.exit_code
        if code is not None:
            ended = utcnow()
            status = to_int(code)
            if status is None:
                return TaskChange(task.id, TaskState.FAILED, ended_at=ended,
                                  last_error=f"unreadable exit status {code!r}")  # fmt: skip
            state = TaskState.SUCCEEDED if status == 0 else TaskState.FAILED
            return TaskChange(task.id, state, exit_status=status, ended_at=ended)
        return TaskChange(task.id, TaskState.RUNNING, handle=done.handle, pgid=done.pgid)

    # --- following ------------------------------------------------------------------

    async def sync(self, tasks: Sequence[Task] | None = None) -> SyncReport:
        """Confirm active tasks on their hosts (all active ones by default) and store changes."""
        if tasks is None:
            tasks = await _db(self.jobs.tasks, ACTIVE)
        todo = [t for t in tasks if t.active and not self._busy(t.job_id)]
        groups: dict[tuple[str, str], list[Task]] = defaultdict(list)
        for task in todo:
            groups[(task.host, task.owner)].append(task)
        results = await asyncio.gather(
            *(self._sync_group(host, owner, group) for (host, owner), group in groups.items())
        )
        changes_by_state: dict[TaskState, list[TaskChange]] = defaultdict(list)
        unreachable: dict[str, str] = {}
        for (host, _owner), result in zip(groups, results, strict=True):
            if isinstance(result, str):
                unreachable[host] = result
                continue
            for task, change in result:
                changes_by_state[task.state].append(change)
        changed: list[Task] = []
        for state, changes in changes_by_state.items():
            done = set(await _db(self.jobs.change_tasks, changes, {state}))
            by_id = {t.id: t for t in todo}
            changed += [apply_change(by_id[c.task_id], c) for c in changes if c.task_id in done]
        for job_id in dict.fromkeys(task.job_id for task in changed):
            self._changed(job_id)
        self._note_ended(changed)
        return SyncReport(tuple(changed), unreachable)

    def _note_ended(self, changed: Sequence[Task]) -> None:
        """Remember the process groups and GPUs of tasks that just ended (for ten minutes)."""
        now = utcnow()
        for task in changed:
            if task.active:
                continue
            if task.pgid is not None:
                self.ended_groups[(task.host, task.pgid)] = now
            for uuid in task.gpus:
                self.ended_gpus[(task.host, uuid)] = now
        cutoff = now - ENDED_MEMORY
        self.ended_groups = {k: at for k, at in self.ended_groups.items() if at >= cutoff}
        self.ended_gpus = {k: at for k, at in self.ended_gpus.items() if at >= cutoff}

    async def _sync_group(
        self, host: str, owner: str, tasks: list[Task]
    ) -> list[tuple[Task, TaskChange]] | str:
        runner = self._runner(host)
        watched = [Watched(t.session, scripts.host_path(t.exit_path), not t.gpus) for t in tasks]
        try:
            census = await runner.sync(self._shell(host, owner), watched)
        except HostUnavailable as error:
            return error.reason
        except RunnerError as error:
            return f"{error.reason} (as {self.unix_user(owner)})"
        out: list[tuple[Task, TaskChange]] = []
        for task in tasks:
            self.engine_starts.note(task, census.starts.get(task.session))
            if (where := census.placed.get(task.session)) and await self.place(task, where):
                self._changed(task.job_id)
            seen = task.session in census.alive
            change = observe(
                task, seen, census.exits.get(task.session), runner.what,
                waiting=task.session in census.waiting, why=census.why.get(task.session),
            )  # fmt: skip
            if change is not None:
                if change.state == TaskState.RUNNING and task.handle is None:
                    change = replace(change, handle=census.alive.get(task.session))
                out.append((task, change))
        return out

    # --- stopping -------------------------------------------------------------------

    async def stop(
        self,
        job: Job | int,
        *,
        grace: float | None = None,
        reason: str | None = None,
        signal: str = "SIGINT",
        patience: float = KILL_PATIENCE,
    ) -> StopReport:
        """`signal` (SIGINT) to each task's process group, after `grace` SIGTERM, after
        `patience` SIGKILL; record it (with `reason` as the tasks' last error, when given)."""
        job_id = job if isinstance(job, int) else job.id
        async with self._lock(job_id):
            current = await _db(self.jobs.get, job_id)
            pending = [
                TaskChange(t.id, TaskState.STOPPED, ended_at=utcnow(),
                           last_error="stopped before it started")
                for t in current.tasks if t.state == TaskState.PENDING
            ]  # fmt: skip
            await _db(self.jobs.change_tasks, pending, {TaskState.PENDING})
            active = [t for t in current.tasks if t.active]
            failures = await self._stop_tasks(
                active, self.grace if grace is None else grace, reason, signal, patience
            )
            self._changed(job_id)
            return StopReport(await _db(self.jobs.get, job_id), failures)

    async def _stop_tasks(
        self,
        tasks: Sequence[Task],
        grace: float,
        reason: str | None = None,
        signal: str = "SIGINT",
        patience: float = KILL_PATIENCE,
    ) -> dict[int, str]:
        """Stop tasks (the job's lock is held); the tasks whose host could not be reached."""
        marks = [TaskChange(t.id, TaskState.STOPPING) for t in tasks]
        await _db(self.jobs.change_tasks, marks, ACTIVE)
        groups: dict[tuple[str, str], list[Task]] = defaultdict(list)
        for task in tasks:
            groups[(task.host, task.owner)].append(task)
        results = await asyncio.gather(
            *(
                self._stop_group(h, o, group, grace, signal, patience)
                for (h, o), group in groups.items()
            )
        )
        failures: dict[int, str] = {}
        changes: list[TaskChange] = []
        for group, result in zip(groups.values(), results, strict=True):
            if isinstance(result, str):
                failures.update({t.id: result for t in group})
                changes += [TaskChange(t.id, TaskState.STOPPING, last_error=result) for t in group]
                continue
            for change in result:
                changes.append(replace(change, last_error=reason) if reason else change)
        done = set(await _db(self.jobs.change_tasks, changes, {TaskState.STOPPING}))
        by_id = {t.id: t for t in tasks}
        self._note_ended([apply_change(by_id[c.task_id], c) for c in changes if c.task_id in done])
        return failures

    async def _stop_group(
        self,
        host: str,
        owner: str,
        tasks: list[Task],
        grace: float,
        signal: str = "SIGINT",
        patience: float = KILL_PATIENCE,
    ) -> list[TaskChange] | str:
        watched = [Watched(t.session, scripts.host_path(t.exit_path)) for t in tasks]
        try:
            how = Stopping(grace, patience, signal, self.timeout)
            halted = await self._runner(host).stop(self._shell(host, owner), watched, how)
        except HostUnavailable as error:
            return f"could not stop it, host unavailable: {error.reason}"
        except RunnerError as error:
            return error.reason
        removal = containers.removal(self.pool.hosts.get(host), tasks)
        if removal:  # a container outlives its killed client: remove it with the task
            try:
                await self._run(host, owner, removal, "sh -s", timeout=self.timeout)
            except HostUnavailable as error:
                log.warning("gpuhive: containers on %s not removed: %s", host, error.reason)
        now = utcnow()
        changes = []
        for task in tasks:
            code = halted.exits.get(task.session)
            status = to_int(code) if code is not None else None
            if task.session in halted.gone and status is not None:
                # It had ended by itself before we asked.
                state = TaskState.SUCCEEDED if status == 0 else TaskState.FAILED
                changes.append(TaskChange(task.id, state, exit_status=status, ended_at=now))
            else:
                changes.append(
                    TaskChange(task.id, TaskState.STOPPED, exit_status=status, ended_at=now)
                )
        return changes

    # --- logs and attaching ---------------------------------------------------------

    async def log(
        self, task: Task, offset: int = 0, tail: int | None = None, limit: int | None = None
    ) -> LogChunk:
        """Read the task's log from byte `offset` (or its last `tail` bytes), up to `limit`."""
        limit = min(limit or self.log_limit, self.log_limit)
        offset = max(0, int(offset))
        wanted = -1 if tail is None else max(0, tail)
        args: list[str | int] = [scripts.host_path(task.log_path), offset, wanted, max(0, limit)]
        result = await self._run(task.host, task.owner, scripts.LOG, scripts.sh_command(*args))
        if result.exit_status != 0:
            raise HostUnavailable(task.host, f"cannot read the log: {output_tail(result)}")
        head, _, body = result.stdout.partition("\n")
        words = head.split()
        if not words or words[0] != "chunk" or len(words) != 4:
            return LogChunk("", offset, offset, 0)
        size, start, count = (int(w) for w in words[1:])
        try:
            data = base64.b64decode(body)[:count]
        except (binascii.Error, ValueError):
            raise HostUnavailable(task.host, "the log came back garbled") from None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = decoder.decode(data, final=False)
        pending = len(decoder.getstate()[0])  # a character cut at the end is read next time
        return LogChunk(text, start, start + len(data) - pending, size)

    def attach_hint(self, task: Task) -> str:
        """The command that attaches a terminal to the task's run (its runner says how)."""
        decl = self.pool.hosts.get(task.host)
        argv = self._runner(task.host).attach(task.session, task.log_path)
        if decl is None:
            return shlex.join(argv)
        account = self.unix_user(task.owner)
        return shlex.join(self.pool.backend_of(decl).attach_hint(decl, account, argv))

    # --- plumbing -------------------------------------------------------------------

    def _lock(self, job_id: int) -> asyncio.Lock:
        return self._locks.setdefault(job_id, asyncio.Lock())

    def _busy(self, job_id: int) -> bool:
        lock = self._locks.get(job_id)
        return lock is not None and lock.locked()

    def _runner(self, host: str) -> TaskRunner:
        """The task runner of `host`, which its backend brings (the default one for a host
        that left the configuration)."""
        decl = self.pool.hosts.get(host)
        return self.pool.backend_of(decl).runner(decl) if decl is not None else DEFAULT_RUNNER

    def _shell(self, host: str, owner: str) -> Shell:
        """Runs a runner's scripts on `host` as the UNIX account of gpuhive user `owner`."""

        async def shell(script: str, command: str, timeout: float | None) -> CommandResult:
            return await self._run(host, owner, script, command, timeout)

        return shell

    async def _run(
        self, host: str, owner: str, script: str, command: str, timeout: float | None = None
    ) -> CommandResult:
        """Run `script` on `host` as the UNIX account of gpuhive user `owner` (on a batch
        system's submit host for a backend that `submits_tasks`)."""
        user = self.unix_user(owner)
        decl = self.pool.hosts.get(host)
        if decl is not None and self.pool.backend_of(decl).submits_tasks:
            backend = self.pool.backend_of(decl)
            return await backend.task_run(decl, command, user, timeout or self.timeout, script)
        return await self.pool.run(
            host, command, user=user, timeout=timeout or self.timeout, stdin=script
        )


async def _db(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Database work off the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def _nothing(_job: Job) -> None:
    return None
