"""The Slurm backend: a host is one node of a Slurm cluster, known through Slurm's own clients.

A host entry `{"name": "n1", "transport": "slurm", "slurm": {"node": "n1", "conf": PATH,
"bin": DIR}}` (node: default the host's name; conf: the cluster's slurm.conf, default Slurm's
own; bin: the folder of Slurm's clients, default found on a safe PATH). Its GPUs (by gres type)
and its state come from `scontrol show node -d -o` (one call per sweep for all the cluster's
nodes); a node Slurm keeps closed (down, drained, failing...) gives its GPUs a failed health
with Slurm's reason, so nothing books them. gpuhive's bookings on its nodes become Slurm
reservations (`SlurmReservations`). Jobs' tasks are batch jobs of their owners, submitted from
this machine (`task_run`, `runners/slurm.py`); a reservation kernel is a step of its owner's
allocation in the booking's reservation (`slurmsteps`). On a node gpuhive may reach itself
(`slurm.probe`, `slurmnode`) the vendor probe runs there, and `run` runs protection's commands;
elsewhere `run` answers that it runs none.

The clients run on this machine as the server's account (root or the SlurmUser: only they may
create reservations), with TZ=UTC and every value quoted.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...errors import Invalid
from ...model import HostDecl, utcnow
from ...model.engines import PREFIX, EngineJob, EngineRefused, Held, booking_of
from ...model.gpus import GpuMetrics
from ..environment import SAFE_PATH, host_env
from ..loops import Loop, end_group, spawn
from ..runners import TaskRunner
from ..runners.slurm import SlurmRunner
from ..slurm import (
    DRAINER,
    SlurmNode,
    SlurmParseError,
    parse_nodes,
    parse_reservations,
    parse_version,
)
from ..slurm import printable as printable
from ..slurmjobs import parse_jobs
from ..slurmpids import confinement, parse_listpids
from ..status import CommandResult, HostUnavailable
from ..vendors import vendor_of
from . import HostBackend, KernelBooking, KernelChannels
from .local import LocalBackend
from .slurmnode import ReachedNode, merge, reach_of
from .slurmsteps import SlurmChannels, SlurmPlace

if TYPE_CHECKING:
    from ..probe import HostSample

_PATH = re.compile(r"/[A-Za-z0-9._/@+-]*\Z")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\Z")
_RESERVATION = re.compile(rf"{re.escape(PREFIX)}\d+\Z")
FRESH = 1.0  # seconds a node listing answers every node's sample of one sweep
GRES_RESERVATIONS = (23, 11)  # the first Slurm whose reservations hold GPUs (TRES=gres/gpu=N)
NOT_RUN = 126  # `run`'s status: gpuhive runs no commands on Slurm nodes yet


@dataclass(frozen=True)
class Cluster:
    """Where a Slurm cluster's clients are and which configuration they read."""

    conf: str | None
    bin: str

    def line(self, *words: str) -> str:
        """`[SLURM_CONF=…] BIN/WORD …` as shell text, every word quoted."""
        conf = f"SLURM_CONF={shlex.quote(self.conf)} " if self.conf else ""
        return conf + " ".join(shlex.quote(w) for w in (f"{self.bin}/{words[0]}", *words[1:]))


def settings_of(decl: HostDecl) -> tuple[str, Cluster]:
    """(node, cluster) of a Slurm host's entry; Invalid names the site's mistake."""
    spec: Any = decl.extra.get("slurm") or {}
    if not isinstance(spec, Mapping):
        raise Invalid(f"Host {decl.name}: slurm must be a mapping such as {{node: n1}}.")
    node = str(spec.get("node", decl.name))
    conf, folder = spec.get("conf"), spec.get("bin")
    if not _NODE.match(node):
        raise Invalid(f"Host {decl.name}: slurm: {node!r} is not a Slurm node name.")
    for key, value in (("conf", conf), ("bin", folder)):
        if value is not None and not (isinstance(value, str) and _PATH.match(value)):
            raise Invalid(f"Host {decl.name}: slurm: {key} must be an absolute path.")
    if folder is None:
        found = shutil.which("scontrol", path=SAFE_PATH)
        folder = found.rsplit("/", 1)[0] if found else "/usr/bin"
    return node, Cluster(conf, folder)


def slurm_uuid(host: str, node: str, index: int) -> str:
    """The UUID gpuhive gives GPU `index` of a Slurm node (Slurm names GPUs by index only)."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuhive:slurm:{host}:{node}:{index}"))


def sample_of(host: str, node: SlurmNode, taken_at: datetime) -> HostSample:
    """A node's GPUs and health as one sample (no readings: Slurm reports none)."""
    from ..probe import HostSample

    gpus, index = [], 0
    for kind in node.gpus:
        for _ in range(kind.count):
            gpus.append(GpuMetrics(index, slurm_uuid(host, node.name, index), kind.type,
                                   None, None, None, None, None, None, None))  # fmt: skip
            index += 1
    health, drain = node.health(), node.drain()
    return HostSample(
        host, taken_at, gpus=tuple(gpus),
        health={g.uuid: health for g in gpus} if health else {},
        drainer=DRAINER, drained={g.uuid: drain for g in gpus} if drain else {},
        engine_held={g.uuid: "a Slurm job" for g in gpus if g.index in node.gpus_used},
    )  # fmt: skip


async def slurm_command(line: str, timeout: float = 20.0) -> CommandResult:
    """Run a Slurm client's shell line here (`sh -c`, TZ=UTC, C locale); never hangs."""
    env = {"PATH": SAFE_PATH, "TZ": "UTC", "LC_ALL": "C"}
    process = await spawn(
        ["sh", "-c", line], stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate()
    except (TimeoutError, asyncio.CancelledError):
        await asyncio.shield(end_group(process))
        raise
    code = process.returncode if process.returncode is not None else -1
    return CommandResult(code, out.decode(errors="replace"), err.decode(errors="replace"))


class SlurmReservations:
    """The reservations of one Slurm cluster, as gpuhive's bookings need them."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.version: tuple[int, int] | None = None
        self.label = "Slurm"

    async def _scontrol(self, *words: str) -> CommandResult:
        try:
            return await slurm_command(self.cluster.line("scontrol", *words))
        except (OSError, TimeoutError) as error:
            raise EngineRefused(f"Slurm's scontrol did not answer: {error}") from None

    async def _version(self) -> tuple[int, int]:
        if self.version is None:
            done = await self._scontrol("--version")
            try:
                self.version = parse_version(done.stdout)
            except SlurmParseError as error:
                raise EngineRefused(str(error)) from None
            self.label = f"Slurm {printable(done.stdout.split()[-1]) if done.stdout else ''}"
        return self.version

    async def why_not(self, gpus: dict[str, tuple[int, int]]) -> str | None:
        if await self._version() >= GRES_RESERVATIONS:
            return None
        partial = sorted(f"{booked} of {has} GPUs of {node}"
                         for node, (booked, has) in gpus.items() if booked < has)  # fmt: skip
        if not partial:
            return None
        return (
            f"This cluster runs {self.label}, whose reservations hold whole nodes only "
            f"(reservations of GPUs need Slurm 23.11 or later); this booking holds "
            f"{', '.join(partial)}. Book every GPU of each node, or ask for fewer nodes."
        )

    def _words(self, held: Held, now: datetime, starting: bool) -> list[str]:
        if not _RESERVATION.match(held.name):
            raise EngineRefused(f"{held.name!r} is not a reservation name of gpuhive's.")
        bad = [u for u in held.users if not _ACCOUNT.match(u)]
        if bad or not held.users:
            raise EngineRefused(f"{bad or held.users!r} cannot be a Slurm user account.")
        words = [f"reservationname={held.name}", f"users={','.join(held.users)}",
                 f"nodes={','.join(held.nodes)}"]  # fmt: skip
        if starting:
            started = held.start <= now + timedelta(seconds=1)
            # both ends rounded up: back-to-back bookings stay back to back in Slurm
            at = _instant(held.start, up=True)
            words.append("starttime=now" if started else f"starttime={at}")
        words.append(f"endtime={_instant(held.end, up=True)}")
        return words

    async def hold(self, held: Held, now: datetime) -> None:
        words = self._words(held, now, starting=True)
        if await self._version() >= GRES_RESERVATIONS:
            words.append(f"TRES=gres/gpu={sum(n for _, n in held.gpus)}")
        done = await self._scontrol("create", "reservation", *words)
        if done.exit_status != 0:
            raise EngineRefused(_said(done))

    async def change(self, held: Held, now: datetime) -> None:
        words = self._words(held, now, starting=held.start > now)
        if await self._version() >= GRES_RESERVATIONS:
            words.append(f"TRES=gres/gpu={sum(n for _, n in held.gpus)}")
        done = await self._scontrol("update", *words)
        if done.exit_status != 0:
            raise EngineRefused(_said(done))

    async def release(self, name: str) -> None:
        if not _RESERVATION.match(name):
            raise EngineRefused(f"{name!r} is not a reservation name of gpuhive's.")
        done = await self._scontrol("delete", f"reservationname={name}")
        said = _said(done)
        if done.exit_status != 0 and "not found" not in said and "Invalid reservation" not in said:
            raise EngineRefused(said)

    async def listing(self) -> dict[str, Held]:
        done = await self._scontrol("show", "reservation", "-o")
        if done.exit_status != 0 and "No reservations" not in done.stdout:
            raise EngineRefused(_said(done))
        try:
            found = parse_reservations(done.stdout)
        except SlurmParseError as error:
            raise EngineRefused(f"Slurm's reservations could not be read: {error}") from None
        out = {}
        for r in found:
            if booking_of(r.name) is None:
                continue
            gpus = re.search(r"gres/gpu=(\d+)", r.tres)
            each = int(gpus.group(1)) // max(1, len(r.nodes)) if gpus else 0
            out[r.name] = Held(r.name, r.start, r.end,
                               tuple((n, each) for n in sorted(r.nodes)), r.users)  # fmt: skip
        return out

    async def running(self) -> list[EngineJob]:
        """The cluster's jobs that hold GPUs now (`squeue --json`: `slurmjobs`)."""
        line = self.cluster.line("squeue", "--json", "-t", "running,completing,suspended")
        try:
            done = await slurm_command(line)
        except (OSError, TimeoutError) as error:
            raise EngineRefused(f"Slurm's squeue did not answer: {error}") from None
        if done.exit_status != 0:
            raise EngineRefused(_said(done))
        try:
            return parse_jobs(done.stdout)
        except SlurmParseError as error:
            raise EngineRefused(f"Slurm's jobs could not be read: {error}") from None


def _instant(at: datetime, up: bool = False) -> str:
    """A UTC instant as Slurm reads it (whole seconds; `up`: rounded up)."""
    whole = at.replace(microsecond=0)
    if up and whole < at:
        whole += timedelta(seconds=1)
    return whole.strftime("%Y-%m-%dT%H:%M:%S")


def _said(done: CommandResult) -> str:
    """Slurm's own words for a refusal, framed."""
    text = " ".join((done.stderr.strip() or done.stdout.strip() or "no reason given").split())
    return printable(text.removeprefix("scontrol: error: "))


class SlurmBackend(HostBackend):
    """Nodes of Slurm clusters: inventory and state from Slurm; bookings as its reservations."""

    name = "slurm"
    needs_address = False
    samples_itself = True
    queues_here = False  # Slurm's queue runs the cluster's jobs, not gpuhive's
    pins_devices = True  # a kernel's step gets its GPUs from Slurm
    submits_tasks = True  # jobs' tasks are submitted from here (`task_run`, `runners/slurm.py`)

    def __init__(self, settings: Any, me: str) -> None:
        super().__init__(settings, me)
        self._listed: dict[Cluster, tuple[float, dict[str, SlurmNode]]] = {}
        self._listing: dict[Cluster, asyncio.Lock] = {}
        self._engines: dict[Cluster, SlurmReservations] = {}
        self._node = ReachedNode(settings, me)  # nodes gpuhive reaches itself (`slurm.probe`)
        self._submit = LocalBackend(settings, me)  # runs the owners' sbatch, squeue, scancel

    async def nodes(self, cluster: Cluster, timeout: float) -> dict[str, SlurmNode]:
        """The cluster's nodes by name, read at most once per FRESH seconds."""
        async with self._listing.setdefault(cluster, asyncio.Lock()):
            kept = self._listed.get(cluster)
            if kept is not None and time.monotonic() - kept[0] < FRESH:
                return kept[1]
            done = await slurm_command(
                cluster.line("scontrol", "show", "node", "-d", "-o"), timeout
            )
            if done.exit_status != 0:
                raise SlurmParseError(f"scontrol show node failed: {_said(done)}")
            nodes = {n.name: n for n in parse_nodes(done.stdout)}
            self._listed[cluster] = (time.monotonic(), nodes)
            return nodes

    async def sample(self, decl: HostDecl, timeout: float) -> HostSample:
        """The node's GPUs and state from Slurm; HostUnavailable when Slurm cannot say."""
        try:
            node, cluster = settings_of(decl)
        except Invalid as error:  # the site's mistake, shown as the host's state
            raise HostUnavailable(decl.name, error.message) from None
        try:
            nodes = await self.nodes(cluster, timeout)
        except (OSError, TimeoutError, SlurmParseError) as error:
            raise HostUnavailable(decl.name, f"Slurm did not say: {error}") from None
        if node not in nodes:
            raise HostUnavailable(decl.name, f"Slurm lists no node {node}")
        sample = sample_of(decl.name, nodes[node], utcnow())
        if not self._reaches(decl):
            return sample
        found = await self._node.probe(decl, timeout)
        try:  # after the probe: a job's process the probe saw is listed by now
            jobs = await self.in_jobs(cluster, node, timeout)
        except HostUnavailable:
            jobs = {}  # the report says less; the kill step asks again, and refuses
        return merge(sample, found, jobs)

    def _reaches(self, decl: HostDecl) -> bool:
        try:
            return reach_of(decl) is not None
        except Invalid as error:
            raise HostUnavailable(decl.name, error.message) from None

    async def in_jobs(self, cluster: Cluster, node: str, timeout: float) -> dict[int, int]:
        """{pid: Slurm job} of the node's processes inside jobs (`slurmpids`; root's view)."""
        try:
            done = await slurm_command(cluster.line("scontrol", "listpids", "*", node), timeout)
        except (OSError, TimeoutError) as error:
            raise HostUnavailable(node, f"scontrol listpids did not answer: {error}") from None
        if done.exit_status != 0 and "No job steps" not in done.stdout + done.stderr:
            raise HostUnavailable(node, f"scontrol listpids failed: {_said(done)}")
        return parse_listpids(done.stdout)

    async def confined(self, decl: HostDecl, pids: list[int]) -> dict[int, str]:
        node, cluster = settings_of(decl)
        jobs = await self.in_jobs(cluster, node, 20.0)
        return {pid: confinement(jobs[pid]) for pid in pids if pid in jobs}

    def reservations(self, decl: HostDecl) -> tuple[str, SlurmReservations]:
        node, cluster = settings_of(decl)
        engine = self._engines.get(cluster)
        if engine is None:
            engine = self._engines[cluster] = SlurmReservations(cluster)
        return node, engine

    async def run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        if self._reaches(decl):  # a node gpuhive may reach itself (`slurmnode`)
            return await self._node.run(decl, command, user, timeout, stdin)
        return CommandResult(NOT_RUN, "", "gpuhive runs no commands on Slurm nodes yet")

    async def start_loop(
        self, decl: HostDecl, command: str, user: str, slot: asyncio.Semaphore
    ) -> Loop:
        raise HostUnavailable(decl.name, "gpuhive runs no commands on Slurm nodes yet")

    async def open_channels(
        self, decl: HostDecl, user: str, booking: KernelBooking | None = None
    ) -> KernelChannels:
        """A kernel as a step of `user`'s allocation in the booking's reservation
        (`slurmsteps`)."""
        node, cluster = settings_of(decl)
        python = str(decl.extra.get("kernel_python") or sys.executable)
        return SlurmChannels(decl, SlurmPlace(cluster.line, node, user), booking, python)

    def runner(self, decl: HostDecl) -> TaskRunner:
        """Jobs' tasks are Slurm batch jobs of their owners on the node (`runners/slurm.py`)."""
        node, _cluster = settings_of(decl)
        return SlurmRunner(node, vendor_of(decl.extra).pinning)

    async def task_run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        """A task runner's script on this machine (the submit host), as `user` through
        runuser, with an explicit environment: the cluster's clients and conf, UTC. Never as
        root or the server's own account: Slurm must see the owner submit and cancel."""
        if user in ("root", self.me):
            return CommandResult(NOT_RUN, "", f"gpuhive submits Slurm jobs only as their "
                                 f"owner's account, not as {user}")  # fmt: skip
        _node, cluster = settings_of(decl)
        env = {**host_env(decl), "PATH": f"{cluster.bin}:{SAFE_PATH}", "TZ": "UTC"}
        if cluster.conf:
            env["SLURM_CONF"] = cluster.conf
        here = replace(decl, extra={**decl.extra, "env": env})
        return await self._submit.run(here, command, user, timeout, stdin)

    @classmethod
    def where(cls, decl: HostDecl, user: str) -> str:
        node, cluster = settings_of(decl)
        return f"Slurm node {node}" + (f" ({cluster.conf})" if cluster.conf else "")
