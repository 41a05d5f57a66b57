"""Preemptible jobs: GPUs a reservation lends while its holder does not use them (issue #31).

A queued job marked `preemptible` may run, besides unbooked time, on GPUs of a reservation
that lends them: the site allows lending (`lending`), the booking did not opt out (`lend`),
the job was preempted fewer than `max_preemptions` times, and the holder has no process on
the GPUs (a GPU with any process is busy and taken by nobody). The Scheduler's admission
pass places such jobs in a second pass over the lent GPUs (`lending_pass`); each placement
opens a LOAN (job, reservation, GPUs, since) before the job starts, and a running
preemptible job gets a loan for every lending booking that begins on its GPUs.

The holder's claim always wins. A loan is reclaimed when
(a) a process of the holder appears on a lent GPU: the `Watch` probes the hosts with open
    loans every `watch_interval` seconds (the sweep would take up to a poll interval);
(b) the holder starts a job on those GPUs through gpuhive: the launcher's start waits for
    the reclaim first (at most the grace and the kill patience);
(c) the holder (or an admin) asks: `POST /reservations/{id}/reclaim`;
(d) the booking chose `reclaim_before_start`: `reclaim_before_start_s` before its start.
Reclaiming sends the job's signal (`preempt_signal`) to its process groups, waits its grace
(the site's `grace_s`, or less when the job asked), then sends SIGTERM and, after
`KILL_PATIENCE`, SIGKILL. The job then goes back to pending with `restarts` one higher; it
keeps its place in the queue, behind new jobs by the service it has had (`order.level`)
while the site's `least_attained_service` is on. That setting also lets a new queued job
preempt running preemptible jobs that have had more service, by the same path (`attained`,
`Reclaims._least_served`). A job preempted `max_preemptions` times is told (an `exhausted`
event) and from then on runs in unbooked time only, and is not preempted for new jobs.

The job's tasks get `GPUHIVE_RESTARTS`, `GPUHIVE_PREEMPT_SIGNAL`, `GPUHIVE_GRACE_S` and
`GPUHIVE_CHECKPOINT_DIR` (a directory per job, the same at every restart, made by the task
itself, as its owner's UNIX account, mode 0700; a link there, a folder of another account or
one open to others, or a parent folder others may write, is refused: the task fails with why).

Whose process is it: the probe reads each process's owner from /proc as root (its real
UID), never from its name or command line, so a process that calls itself the holder's
reclaims nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..hosts.pool import HostUnavailable
from ..hosts.probe import HostSample, parse_probe, probe_command
from ..hosts.vendors import vendor_of
from ..model import Reservation, utcnow
from ..model.accounts import unix_account
from ..model.jobs import PREEMPT_SIGNALS, Job, Loan, TaskState
from .admission import FOREVER, Candidate, GpuState

if TYPE_CHECKING:
    from ..monitor.sampler import Sweep

log = logging.getLogger(__name__)

PREEMPT_PATIENCE = 0.5  # seconds between SIGTERM and SIGKILL once a reclaim's grace is over
CHECKPOINTS = "checkpoints"


@dataclass(frozen=True)
class PreemptionSettings:
    """The site's preemption settings (the `GpuHive` traits of the same names)."""

    lending: bool = True
    grace_s: int = 30
    max_preemptions: int = 3
    least_attained_service: bool = True  # new queued jobs preempt well-served ones (`attained`)
    reclaim_before_start_s: int = 300
    watch_interval: float = 0.5
    user_map: Mapping[str, str] = field(default_factory=dict)  # gpuhive user -> UNIX user

    def unix_user(self, name: str) -> str:
        """The UNIX user whose processes are `name`'s (protection's `user_map`)."""
        return unix_account(self.user_map, name)

    def grace(self, job: Job) -> float:
        """The job's grace: the site's, or less when the job asked for less."""
        if job.grace_s is None:
            return float(self.grace_s)
        return float(max(0, min(job.grace_s, self.grace_s)))

    def may_borrow(self, job: Job) -> bool:
        """Whether the job may run on lent GPUs now."""
        return (
            self.lending and job.preemptible and job.queued and job.restarts < self.max_preemptions
        )


def check_request(preemptible: bool, signal: str, grace_s: int | None, site_grace: int) -> None:
    """Refuse (ValueError) a preemption request the site cannot honour."""
    if signal not in PREEMPT_SIGNALS:
        raise ValueError(f"preempt_signal must be one of {', '.join(PREEMPT_SIGNALS)}.")
    if grace_s is not None and grace_s < 0:
        raise ValueError("grace_s must be 0 or more.")
    if grace_s is not None and grace_s > site_grace:
        raise ValueError(f"grace_s may be at most the site's preemption grace, {site_grace} s.")
    if not preemptible and (signal != "SIGTERM" or grace_s is not None):
        raise ValueError("preempt_signal and grace_s are for preemptible jobs (preemptible: true).")


def checkpoint_dir(job: Job, log_dir: str, account: str) -> str:
    """The job's checkpoint directory on its hosts: stable across restarts, per job (the
    hash of its creation time keeps two stores' job 7 apart); `~/` is the home, `{user}` the
    name, of the owner's UNIX account `account`."""
    directory = log_dir.replace("{user}", account).rstrip("/")
    created = job.created_at.isoformat() if job.created_at else ""
    tag = hashlib.sha256(f"{job.id}:{created}:{job.name}".encode()).hexdigest()[:8]
    return f"{directory}/{CHECKPOINTS}/{job.id}-{tag}"


def env_lines(job: Job, settings: PreemptionSettings, log_dir: str, account: str) -> str:
    """Lines the task's environment file gets after its own: the preemption variables, and
    the checkpoint directory made (as `account`, who sources the file) if missing, checked
    (`CHECKPOINT_CHECK`) whether made now or found."""
    if not job.preemptible:
        return ""
    lines = [
        f"export GPUHIVE_RESTARTS={shlex.quote(str(job.restarts))}\n",
        f"export GPUHIVE_PREEMPT_SIGNAL={shlex.quote(job.preempt_signal)}\n",
        f"export GPUHIVE_GRACE_S={shlex.quote(f'{settings.grace(job):g}')}\n",
    ]
    path = checkpoint_dir(job, log_dir, account)
    home = path.startswith("~/")
    value = '"$HOME"/' + shlex.quote(path[2:]) if home else shlex.quote(path)
    lines.append(f"export GPUHIVE_CHECKPOINT_DIR={value}\n")
    lines.append(CHECKPOINT_CHECK)
    return "".join(lines)


# Sourced by the task as its owner: the folder is never followed through a link, and is used
# only when it and its parent are the owner's, it is open to nobody else (0700) and the parent
# is writable by nobody else (who could swap the folder). `find -perm /077` reads the mode
# without following a link; `[ -O ]` is "owned by me". Refusals go to the task's log.
CHECKPOINT_CHECK = r"""gh_d=$GPUHIVE_CHECKPOINT_DIR; gh_up=$(dirname -- "$gh_d")
gh_no() { echo "gpuhive: refused the checkpoint folder $gh_d: $1" >&2; exit 1; }
[ -L "$gh_d" ] && gh_no "it is a link (gpuhive never follows one there)"
mkdir -p -m 700 -- "$gh_d" || exit 1
[ -L "$gh_d" ] && gh_no "it is a link (gpuhive never follows one there)"
[ -d "$gh_d" ] || gh_no "it is not a folder"
[ -O "$gh_d" ] || gh_no "it belongs to another account; remove it or use another folder"
[ -z "$(find "$gh_d" -maxdepth 0 -perm /077)" ] || gh_no "others may open it (chmod 700 it)"
{ [ ! -L "$gh_up" ] && [ -O "$gh_up" ] && [ -z "$(find "$gh_up" -maxdepth 0 -perm /022)" ]; } ||
  gh_no "its parent $gh_up is a link, another account's, or writable by others"
unset -f gh_no; unset gh_d gh_up
"""


# --- what lends, and to whom ----------------------------------------------------------


@dataclass
class Lending:
    """The bookings the lending decisions look at, with each one's choice."""

    bookings: list[Reservation] = field(default_factory=list)
    choice: dict[int, tuple[bool, bool]] = field(default_factory=dict)  # lend, reclaim early
    loans: list[Loan] = field(default_factory=list)

    def lends(self, res: Reservation, settings: PreemptionSettings) -> bool:
        """Whether `res` lends its GPUs. A share of a GPU never does: its GPU is shared with
        other holders already, and a borrower would take all of it (#44)."""
        if res.is_share:
            return False
        return settings.lending and self.choice.get(res.id, (True, False))[0]

    def early(self, res: Reservation) -> bool:
        return self.choice.get(res.id, (True, False))[1]

    def on(self, uuids: Iterable[str], start: float, end: float) -> list[Reservation]:
        """Live bookings with one of `uuids` overlapping [start, end)."""
        wanted = set(uuids)
        return [
            r
            for r in self.bookings
            if not r.cancelled
            and r.start.timestamp() < end
            and r.end.timestamp() > start
            and wanted.intersection(g.uuid for g in r.gpus)
        ]


def reclaim_from(res: Reservation, lending: Lending, settings: PreemptionSettings) -> float:
    """When the booking takes its GPUs back at the latest (its start, or earlier)."""
    start = res.start.timestamp()
    if lending.early(res):
        start -= settings.reclaim_before_start_s
    return start


def lending_states(
    states: Mapping[str, GpuState],
    reserved: Mapping[str, Sequence[tuple[float, float]]],
    lending: Lending,
    settings: PreemptionSettings,
    now: float,
    taken: Iterable[str] = (),
    kept: Iterable[tuple[float, float, Sequence[str]]] = (),
) -> tuple[dict[str, GpuState], dict[str, list[tuple[float, float]]]]:
    """GPU states and booked spans as a borrower sees them: a lending booking's span is no
    span (from its reclaim time on it is: `reclaim_before_start`), GPUs `taken` this tick
    are busy, and the slots the first pass `kept` for waiting jobs count as booked."""
    lent: dict[tuple[str, float], float] = {}  # (GPU, booking start) -> it blocks from
    for res in lending.bookings:
        if not res.cancelled and lending.lends(res, settings):
            for gpu in res.gpus:
                lent[(gpu.uuid, res.start.timestamp())] = reclaim_from(res, lending, settings)
    spans: dict[str, list[tuple[float, float]]] = {}
    for uuid, found in reserved.items():
        for low, high in found:
            block = lent.get((uuid, low))
            if block is None:
                spans.setdefault(uuid, []).append((low, high))
            elif block < low:  # reclaimed before its start: booked from then on
                spans.setdefault(uuid, []).append((block, high))
    for start, end, uuids in kept:
        for uuid in uuids:
            spans.setdefault(uuid, []).append((start, end))
    for found in spans.values():
        found.sort()
    busy = set(taken)
    out: dict[str, GpuState] = {}
    for uuid, state in states.items():
        free_until = next((low for low, high in spans.get(uuid, ()) if high > now), FOREVER)
        blocker = state.blocker
        if blocker is None and uuid in busy:
            blocker = f"{state.ref} was just given to another job"
        out[uuid] = replace(state, blocker=blocker, free_until=free_until)
    return out, spans


def borrowers(
    candidates: Iterable[Candidate], jobs: Mapping[int, Job], settings: PreemptionSettings
) -> list[Candidate]:
    """The candidates that may run on lent GPUs."""
    return [c for c in candidates if c.job_id in jobs and settings.may_borrow(jobs[c.job_id])]


# --- a running preemptible job ----------------------------------------------------------


@dataclass
class Verdict:
    """What a tick does about one running preemptible job."""

    reclaim: tuple[str, int] | None = None  # why, and the reservation that takes it back
    requeue: str | None = None  # a booking that does not lend begins: the usual requeue
    lend: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # loans to open
    end: list[int] = field(default_factory=list)  # reservations whose loans are over


def judge(
    job: Job,
    lending: Lending,
    settings: PreemptionSettings,
    now: float,
    lead: float,
    holder_procs: Callable[[Reservation, Sequence[str]], str | None],
) -> Verdict:
    """The verdict on a running preemptible job: keep borrowing, reclaim or requeue."""
    verdict = Verdict()
    uuids = set(job.gpus)
    ahead = now + lead + settings.reclaim_before_start_s
    near = [
        res
        for res in lending.on(uuids, now, ahead)
        if min(res.start.timestamp(), reclaim_from(res, lending, settings)) <= now + lead
    ]
    for res in near:
        mine = tuple(sorted(uuids.intersection(g.uuid for g in res.gpus)))
        if not lending.lends(res, settings) or not settings.may_borrow(job):
            if res.start.timestamp() <= now + lead:
                whose = "does not lend its GPUs" if job.restarts < settings.max_preemptions \
                    else "is reserved (the job was preempted too often to borrow)"  # fmt: skip
                verdict.requeue = (
                    f"{', '.join(mine)}: reservation {res.id} {whose}; back in the queue"
                )
            continue
        if lending.early(res) and now >= reclaim_from(res, lending, settings):
            why = f"reservation {res.id} takes its GPUs back before its start"
            verdict.reclaim = verdict.reclaim or (why, res.id)
            verdict.lend.append((res.id, mine))  # the loan that is reclaimed
            continue
        active = res.start.timestamp() <= now
        seen = holder_procs(res, mine) if active else None
        if seen is not None:
            verdict.reclaim = verdict.reclaim or (f"{seen} on a lent GPU", res.id)
        verdict.lend.append((res.id, mine))
    open_ = {loan.reservation_id for loan in lending.loans if loan.job_id == job.id}
    verdict.end = sorted(open_ - {res.id for res in near})
    return verdict


def holder_process(
    samples: Mapping[str, HostSample],
    res: Reservation,
    uuids: Sequence[str],
    unix_user: Callable[[str], str],
    job_groups: Iterable[tuple[str, int]] = (),
) -> str | None:
    """`process P of USER` for a process of the holder on one of `uuids`, or None. The owner
    is the probe's (the process's real UID read by root); the job's own groups never count."""
    mine = set(job_groups)
    wanted = set(uuids)
    names = {res.owner, unix_user(res.owner)}
    for gpu in res.gpus:
        if gpu.uuid not in wanted:
            continue
        sample = samples.get(gpu.host)
        if sample is None:
            continue
        for proc in sample.processes:
            if gpu.uuid not in (proc.gpu_uuid, proc.mig_uuid):
                continue
            if proc.pgid is not None and (gpu.host, proc.pgid) in mine:
                continue
            if proc.user in names:
                return f"process {proc.pid} of {proc.user}"
    return None


def job_groups(job: Job) -> set[tuple[str, int]]:
    """(host, process group) of the job's active tasks."""
    return {(t.host, t.pgid) for t in job.tasks if t.active and t.pgid is not None}


def samples_of(sweep: Sweep | None) -> dict[str, HostSample]:
    return dict(sweep.samples) if sweep is not None else {}


# --- the fast watch ---------------------------------------------------------------------


class Watch:
    """While loans are open, probe their hosts every `interval` seconds and reclaim a loan
    whose holder's process appears (the leader's sweeps come only every poll interval)."""

    def __init__(
        self,
        probe: Callable[[str], Any],
        loans: Callable[[], Any],
        reclaim: Callable[[Job, str, int], Any],
        interval: float,
    ) -> None:
        self._probe = probe  # async host -> HostSample | None
        self._loans = loans  # async () -> [(Job, Reservation)] on open, unreclaimed loans
        self._reclaim = reclaim  # async (job, why, reservation id)
        self.interval = interval
        self.task: asyncio.Task[None] | None = None
        self.unix_user: Callable[[str], str] = lambda name: name

    def ensure(self) -> None:
        """Run the watch unless it runs already."""
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            try:
                lent = await self._loans()
                if not lent:
                    return
                await self.once(lent)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("gpuhive preemption: the watch failed; trying again")
            await asyncio.sleep(self.interval)

    async def once(self, lent: Sequence[tuple[Job, Reservation]]) -> None:
        hosts = sorted({g.host for _, res in lent for g in res.gpus})
        found = await asyncio.gather(*(self._probe(h) for h in hosts))
        samples = {h: s for h, s in zip(hosts, found, strict=True) if s is not None}
        for job, res in lent:
            uuids = tuple(sorted(set(job.gpus).intersection(g.uuid for g in res.gpus)))
            seen = holder_process(samples, res, uuids, self.unix_user, job_groups(job))
            if seen is not None:
                await self._reclaim(job, f"{seen} on a lent GPU", res.id)


async def probe_host(pool: Any, host: str, timeout: float = 5.0) -> HostSample | None:
    """One probe of one host, as the monitor's without the health query (None: it did not
    answer)."""
    try:
        decl = getattr(pool, "hosts", {}).get(host)
        vendor = vendor_of(decl.extra if decl else None)
        result = await pool.run(host, probe_command(vendor, health=False), timeout=timeout)
        return parse_probe(host, result.stdout, utcnow(), vendor=vendor)
    except (HostUnavailable, ValueError) as error:
        log.debug("gpuhive preemption: probing %s failed: %s", host, error)
        return None


def free_by(now: datetime, grace: float) -> datetime:
    """When GPUs reclaimed now are free at the latest."""
    return now + timedelta(seconds=grace + PREEMPT_PATIENCE + 1)


def stopped(job: Job) -> bool:
    """Whether none of the job's tasks may still run."""
    return not any(t.active for t in job.tasks) and any(
        t.state == TaskState.STOPPED for t in job.tasks
    )
