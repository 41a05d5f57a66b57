"""A reservation kernel on a Slurm node: a step of its owner's allocation in the booking's
Slurm reservation, and its sockets reached through relay steps of the same allocation.

- The allocation: `salloc --no-shell --reservation=gpuhive-N --gres=gpu:G --nodelist=NODE`
  as the owner's UNIX account, its time limit the booking's end: Slurm ends it (and every step
  in it) then, whatever becomes of this server. Shutting the kernel down cancels it.
- The kernel: `srun --overlap --jobid=J --gres=gpu:G` as the owner. Slurm gives the step its
  GPUs (the vendor's pinning variable as Slurm numbers them, confined by its cgroups where the site
  constrains devices); its stdin and merged output are ours, as over SSH.
- The sockets: each connection to a local Unix socket (in this server's 0700 folder) starts
  one step, `srun --overlap --gres=none -u PYTHON -I -S -c RELAY PATH`, that connects, as the
  owner, to the kernel's socket on the node and copies bytes both ways. No TCP port opens.
- Commands (a signal, a clean-up): a step too, as the owner.

Every client runs through runuser as the owner (never as this server's account), from an
explicit environment (a fixed PATH, the account's HOME, USER and LOGNAME, TZ=UTC, the
cluster's SLURM_CONF): nothing of the server's own environment reaches the allocation, and
srun exports only that. Every value is shell-quoted; the job id Slurm prints is used only in
commands run as the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ...model import HostDecl, utcnow
from ...model.engines import engine_name
from ..environment import SAFE_PATH
from ..loops import end_group, spawn
from ..slurm import expand_hostlist
from ..status import HostUnavailable
from . import KernelBooking, KernelChannels, Session
from .sessions import ProcessSession

GRANTED = re.compile(r"Granted job allocation (\d+)")
_JOB_NODE = re.compile(r"^\s*Nodes=(\S+) .*?GRES=(\S*)", re.MULTILINE)
_IDX = re.compile(r"gpu(?::[^:(,]+)?(?::\d+)?\(IDX:([0-9,-]+)\)")
WAIT = 20  # seconds salloc waits for the reservation's GPUs before it gives up
CHUNK = 65536
# The relay on the node: stdin to the socket, the socket to stdout, until either side ends.
RELAY = """
import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
def up():
    while True:
        d = os.read(0, 65536)
        if not d:
            break
        s.sendall(d)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    d = s.recv(65536)
    if not d:
        break
    os.write(1, d)
"""


@dataclass(frozen=True)
class SlurmPlace:
    """Where the kernel's allocation is: the cluster's clients, the node, the owner."""

    line: Callable[..., str]  # the cluster's `Cluster.line`: `[SLURM_CONF=…] BIN/WORD …`, quoted
    node: str
    account: str


def owner_env(account: str) -> dict[str, str]:
    """The whole environment of the owner's Slurm clients (srun exports it to the steps)."""
    env = {"PATH": SAFE_PATH, "TZ": "UTC", "LC_ALL": "C", "USER": account, "LOGNAME": account}
    with contextlib.suppress(KeyError):
        env["HOME"] = pwd.getpwnam(account).pw_dir
    return env


def job_gpus(text: str, node: str) -> tuple[int, ...]:
    """The GPU indexes (Slurm's IDX) a job holds on `node`, from `scontrol show job -d`
    (`Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:a100:4(IDX:0-3)`); () when it names none."""
    found: set[int] = set()
    for match in _JOB_NODE.finditer(text):
        if node not in expand_hostlist(match.group(1)):
            continue
        for ranges in _IDX.findall(match.group(2)):
            for part in ranges.split(","):
                low, _, high = part.partition("-")
                if low.isdigit() and (high.isdigit() or not high):
                    found.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(found))


def minutes_until(end: datetime, now: datetime) -> int:
    """Slurm's time limit (whole minutes, at least one) that ends an allocation by `end`."""
    return max(1, math.ceil((end - now).total_seconds() / 60))


class SlurmChannels(KernelChannels):
    """One kernel's allocation and steps on a Slurm node (see the module's text)."""

    def __init__(
        self, decl: HostDecl, step: SlurmPlace, booking: KernelBooking | None, python: str
    ) -> None:
        self.decl, self.step, self.booking = decl, step, booking
        self.python = python if "/" in python else "python3"  # the relay's interpreter
        self.job: int | None = None
        self._said = ""  # what salloc said, for a refusal
        self._servers: list[asyncio.AbstractServer] = []
        self._relays: set[asyncio.subprocess.Process] = set()
        self._kernel: asyncio.subprocess.Process | None = None
        self._closed = False

    # --- the owner's clients ---------------------------------------------------------

    def _argv(self, line: str) -> list[str]:
        if self.step.account == _me():
            return ["sh", "-c", line]
        if os.geteuid() != 0:
            raise HostUnavailable(
                self.decl.name, f"a kernel on Slurm runs as {self.step.account}: this needs root"
            )
        return ["runuser", "-u", self.step.account, "--", "sh", "-c", line]

    async def _spawn(self, line: str, **pipes: int) -> asyncio.subprocess.Process:
        env = owner_env(self.step.account)
        try:
            return await spawn(self._argv(line), env=env, cwd=env.get("HOME", "/"), **pipes)
        except (OSError, ValueError) as error:
            raise HostUnavailable(self.decl.name, f"cannot start Slurm's client: {error}") from None

    def _srun(self, *words: str, gres: str = "none", unbuffered: bool = False) -> str:
        assert self.job is not None
        head = ["srun", "--overlap", f"--jobid={self.job}", f"--nodelist={self.step.node}",
                "--nodes=1", "--ntasks=1", f"--gres={gres}", "--quiet"]  # fmt: skip
        if unbuffered:
            head.append("--unbuffered")
        return self.step.line(*head, *words)

    async def _allocate(self) -> None:
        """The owner's allocation in the booking's reservation (once; again if it ended)."""
        if self.job is not None and await self._running():
            return
        booking = self.booking
        if booking is None:
            raise HostUnavailable(self.decl.name, "a kernel on a Slurm node needs a booking")
        rid = booking.reservation_id
        line = self.step.line(
            "salloc", "--no-shell", f"--reservation={engine_name(rid)}",
            f"--nodelist={self.step.node}", "--nodes=1", "--ntasks=1",
            f"--gres=gpu:{booking.gpus}", f"--time={minutes_until(booking.end, utcnow())}",
            f"--immediate={WAIT}", f"--job-name=gpuhive-kernel-{rid}",
        )  # fmt: skip
        process = await self._spawn(line, stdin=asyncio.subprocess.DEVNULL,
                                    stdout=asyncio.subprocess.PIPE,
                                    stderr=asyncio.subprocess.STDOUT)  # fmt: skip
        try:
            async with asyncio.timeout(WAIT + 10):
                out, _ = await process.communicate()
        except TimeoutError:
            await end_group(process)
            raise HostUnavailable(self.decl.name, "Slurm granted no allocation in time") from None
        said = " ".join(out.decode(errors="replace").split())
        granted = GRANTED.search(said)
        if process.returncode != 0 or granted is None:
            words_said = said.replace("salloc: error: ", "")[-300:] or "no reason given"
            raise HostUnavailable(
                self.decl.name, f"Slurm granted no allocation for the kernel: {words_said}"
            )
        self.job = int(granted.group(1))
        await self._check_gpus(booking)

    async def _check_gpus(self, booking: KernelBooking) -> None:
        """The allocation's GPUs are the booked ones, by Slurm's IDX (`scontrol show job -d`),
        else it is cancelled and the start refused (a reservation of a GPU count, Slurm
        >= 23.11, lets Slurm pick which GPUs of the node)."""
        line = self.step.line("scontrol", "show", "job", "-d", str(self.job))
        said = await self._output(line, 20)
        got = job_gpus(said or "", self.step.node)
        if booking.indexes and got == booking.indexes:
            return
        await self._output(self.step.line("scancel", str(self.job)), 20)
        self.job = None
        shown = ",".join(map(str, got)) if got else "none that it says"
        raise HostUnavailable(
            self.decl.name,
            f"Slurm gave the kernel's allocation GPUs IDX {shown} of {self.step.node}, not the "
            f"booked {','.join(map(str, booking.indexes))}; it was cancelled",
        )

    async def _running(self) -> bool:
        """Whether the allocation still runs (squeue as the owner)."""
        line = self.step.line("squeue", "--noheader", f"--jobs={self.job}", "--format=%T")
        found = await self._output(line, 20)
        return found is not None and found.strip() == "RUNNING"

    async def _output(self, line: str, timeout: float) -> str | None:
        pipe = asyncio.subprocess.PIPE
        process = await self._spawn(line, stdin=asyncio.subprocess.DEVNULL, stdout=pipe,
                                    stderr=asyncio.subprocess.STDOUT)  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                out, _ = await process.communicate()
        except TimeoutError:
            await end_group(process)
            return None
        self._said = out.decode(errors="replace").strip()[-300:]
        return out.decode(errors="replace") if process.returncode == 0 else None

    # --- the seam ----------------------------------------------------------------------

    async def start(self, line: str) -> Session:
        await self._allocate()
        assert self.booking is not None
        pipe = asyncio.subprocess.PIPE
        step = self._srun("sh", "-c", line, gres=f"gpu:{self.booking.gpus}", unbuffered=True)
        process = await self._spawn(step, stdin=pipe, stdout=pipe,
                                    stderr=asyncio.subprocess.STDOUT)  # fmt: skip
        self._kernel = process
        return ProcessSession(process)

    async def forward(self, local: str, remote: str) -> None:
        server = await asyncio.start_unix_server(
            lambda reader, writer: self._relay(reader, writer, remote), path=local
        )
        os.chmod(local, 0o600)
        self._servers.append(server)

    async def _relay(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, remote: str
    ) -> None:
        """One connection: a relay step to the kernel's socket `remote`, bytes both ways."""
        pipe = asyncio.subprocess.PIPE
        try:
            step = self._srun(self.python, "-I", "-S", "-c", RELAY, remote, unbuffered=True)
            process = await self._spawn(step, stdin=pipe, stdout=pipe,
                                        stderr=asyncio.subprocess.DEVNULL)  # fmt: skip
        except HostUnavailable:
            writer.close()
            return
        self._relays.add(process)
        stdin, stdout = process.stdin, process.stdout
        assert stdin is not None
        assert stdout is not None

        async def up() -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await reader.read(CHUNK):
                    stdin.write(data)
                    await stdin.drain()
            with contextlib.suppress(OSError, ConnectionError):
                stdin.close()

        async def down() -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await stdout.read(CHUNK):
                    writer.write(data)
                    await writer.drain()

        sending = asyncio.ensure_future(up())
        try:
            await down()
        finally:
            sending.cancel()
            writer.close()
            await end_group(process)
            self._relays.discard(process)

    async def unforward(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for process in list(self._relays):
            await end_group(process)

    async def run(self, command: str, timeout: float) -> str | None:
        if self.job is None:
            return "the kernel has no Slurm allocation"
        found = await self._output(self._srun("sh", "-c", command), timeout)
        return None if found is not None else (self._said or "the step failed")

    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """The kernel's steps and its allocation end (scancel as the owner)."""
        if self._closed:
            return
        self._closed = True
        await self.unforward()
        if self._kernel is not None and self._kernel.returncode is None:
            await end_group(self._kernel)
        if self.job is not None:
            await self._output(self.step.line("scancel", str(self.job)), 20)


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
