"""Starting a kernel process on a GPU host as a user, and reaching its sockets safely.

A `HostKernel` runs through its host backend's channels (`hosts.backends`). Over SSH the
kernel runs in a session of a connection the pool's SSH backend keeps for kernels (the pool's
key and known hosts, keepalive every second, so a silent host is noticed in about 4 s). Its ZMQ
sockets are Unix sockets in a 0700 directory on the host, reachable only by its owner (and
root); the server reaches them through SSH forwards that end in Unix sockets in a 0700
directory of the server's own user. No TCP port is opened for the kernel on either machine,
so nothing on the network, and no other local user of either machine, can connect to it; the
HMAC key (sent on stdin, kept in 0600 files) still signs every message.

A backend that `runs_here` (the local one) gets `local.py`'s kernel instead.

The kernel's side is `launch_script.py`; its marked lines say when the sockets are bound
(pid, process group, directory) or why it could not start. Those lines are the user's words:
over SSH the pid, group and directory are used only in commands run as the user on the host
(a signal, removing the directory, the forwards' far ends), never with this server's rights.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal as signals
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import Unavailable
from ..hosts.backends import KernelChannels, Session
from ..hosts.pool import HostPool, HostUnavailable
from . import images, launch_script
from .launch import PORTS, SCRIPT, Launch, LaunchError, Output, describe_failure, shell_command

log = logging.getLogger(__name__)

PING = 1.0  # seconds between the lines on a kernel's stdin (see launch_script.watch)


class KernelProcess:
    """A kernel process on a host: launch, exit status, signals, the sockets' address."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.pid: int | None = None
        self.pgid: int | None = None
        self.dir: str | None = None  # the kernel's socket directory on its host
        self.lost: str | None = None  # why the connection to the kernel is gone
        self.on_lost: Callable[[str], Awaitable[None]] | None = None  # told at once
        self._pinger: asyncio.Future[None] | None = None

    @property
    def address(self) -> str:
        """The ZMQ ipc address prefix the server connects to (PREFIX-1 … PREFIX-5)."""
        raise NotImplementedError

    async def start(self, launch: Launch) -> None:
        raise NotImplementedError

    def exit_status(self) -> int | None:
        raise NotImplementedError

    async def signal(self, signum: int) -> None:
        raise NotImplementedError

    async def end(self) -> None:
        """After the process has exited (or a restart's stop): drop what its launch made."""

    async def close(self) -> None:
        """Everything of this kernel goes: process, forwards, directories, connection."""

    def _write(self, data: str) -> None:
        """Write to the kernel's stdin (the keep-alive line)."""
        raise NotImplementedError

    async def _ping(self) -> None:
        """A line a second on the kernel's stdin: its watchdog's sign that we are here."""
        with contextlib.suppress(Exception):
            while True:
                await asyncio.sleep(PING)
                self._write("\n")

    def _start_ping(self) -> None:
        self._stop_ping()
        if self.launch.orphan_timeout > 0:
            self._pinger = asyncio.ensure_future(self._ping())

    def _stop_ping(self) -> None:
        pinger, self._pinger = self._pinger, None
        if pinger is not None:
            pinger.cancel()

    async def _await_ready(self, output: Output, exited: Any) -> dict[str, Any]:
        """The fields of the kernel's READY line: what the user's process says, so never the
        ground for an action of this server's own user (LocalKernel ignores them)."""
        try:
            async with asyncio.timeout(self.launch.timeout):
                kind, fields = await output.marked
        except TimeoutError:
            raise LaunchError(
                f"The kernel on {self.launch.host.name} did not start within "
                f"{self.launch.timeout:.0f} s: {output.text()[-400:] or 'no output'}"
            ) from None
        if kind == "READY":
            return fields
        if kind == "EXITED":
            await asyncio.sleep(0.05)
            code = exited()
            raise LaunchError(
                f"The kernel on {self.launch.host.name} exited at once (status {code}): "
                f"{output.text()[-400:] or 'no output'}"
            )
        found = fields.get("python")
        raise LaunchError(describe_failure(str(fields.get("code")), self.launch, output.text(),
                                           found if isinstance(found, str) else None))  # fmt: skip

    def _stdin(self, launch: Launch) -> str:
        # The base is the environment the launch command got: the host's login environment
        # over SSH, command_env (a fixed base and the host's env) on `local`.
        data = {"key": launch.key, "signature_scheme": launch.signature_scheme, "env": launch.env,
                "inherit": True, "dir": self.dir, "source": SCRIPT,
                "orphan_timeout": launch.orphan_timeout}  # fmt: skip
        return json.dumps(data) + "\n"


def _number(value: Any) -> bool:
    """A process id that names one process (not 0 or 1: 'everything' to kill)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


class HostKernel(KernelProcess):
    """A kernel started through its host backend's channels (over SSH: a session of a
    connection of the pool's SSH stack), its sockets forwarded to this machine."""

    def __init__(self, launch: Launch, pool: HostPool) -> None:
        super().__init__(launch)
        self.pool = pool
        self.channels: KernelChannels | None = None
        self.process: Session | None = None
        self.local_dir = tempfile.mkdtemp(prefix="gpuhive-k-")  # 0700, the server's user
        self._reader: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return os.path.join(self.local_dir, launch_script.SOCKET_NAME)

    async def _open(self) -> KernelChannels:
        if self.channels is not None and not self.channels.closed():
            return self.channels
        if self.channels is not None:
            await self.channels.close()  # lost: it lets go of its connection
        decl, user = self.launch.host, self.launch.user
        try:
            backend = self.pool.backend_of(decl)
            channels = await backend.open_channels(decl, user, self.launch.booking)
        except HostUnavailable as error:
            raise Unavailable(f"Cannot start a kernel on {decl.name}: {error.reason}") from None
        channels.on_lost = self._lost
        self.channels = channels
        return channels

    async def _lost(self, why: str) -> None:
        self.lost = why
        if self.on_lost is not None:
            await self.on_lost(why)

    async def start(self, launch: Launch) -> None:
        self.launch = launch
        channels = await self._open()
        output = Output()
        line = shell_command(launch.python)
        if launch.image is not None:  # a fresh container and folder each launch
            await self._clean_up(channels)
            self.dir, line = None, images.command(launch, None)
        try:
            process = await channels.start(line)
        except HostUnavailable as error:
            raise Unavailable(
                f"Cannot start a kernel on {launch.host.name}: {error.reason}"
            ) from None
        self.process = process
        process.write(self._stdin(launch))
        self._reader = asyncio.ensure_future(self._read(process, output))
        said = await self._await_ready(output, lambda: process.returncode)
        # The host's values, acted on only as the user on the host (kill, rm, forwards).
        pid, pgid, folder = said.get("pid"), said.get("pgid"), said.get("dir")
        if not (_number(pid) and _number(pgid) and isinstance(folder, str)
                and folder.startswith("/") and "\n" not in folder):  # fmt: skip
            raise LaunchError(f"The kernel on {launch.host.name} gave no usable address.")
        self.pid, self.pgid, self.dir = pid, pgid, folder
        await self._forward(channels)
        self._start_ping()

    async def _clean_up(self, channels: KernelChannels) -> None:
        """Remove the last launch's folder (and its container, in an image) as the user."""
        lines = [f"rm -rf -- {shlex.quote(self.dir)}"] if self.dir else []
        if self.launch.image is not None:
            lines.append(images.remove_command(self.launch) or "true")
        if lines:
            await channels.run("; ".join(lines), 30)

    def _write(self, data: str) -> None:
        if self.process is not None:
            self.process.write(data)

    async def _read(self, process: Session, output: Output) -> None:
        async for line in process.lines():
            output.line(line)
        output.ended()

    async def _forward(self, channels: KernelChannels) -> None:
        await channels.unforward()
        assert self.dir is not None
        for port in PORTS.values():
            local = f"{self.address}-{port}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)  # left by a restart (the kernel manager cleans only some)
            await channels.forward(local, f"{self.dir}/{launch_script.SOCKET_NAME}-{port}")

    def exit_status(self) -> int | None:
        if self.process is None:
            return 0
        code = self.process.returncode
        if code is not None:
            return code
        if self.lost is not None or self.channels is None or self.channels.closed():
            return 255
        return None

    async def signal(self, signum: int) -> None:
        if self.pgid is None or self.channels is None or self.channels.closed():
            return
        name = signals.Signals(signum).name.removeprefix("SIG")
        command = f"kill -s {name} -- -{int(self.pgid)}"
        if self.launch.image is not None:  # its pid is the container's: through the engine
            command = images.signal_line(self.launch, name)
        failed = await self.channels.run(command, self.pool.settings.command_timeout)
        if failed is not None:
            log.info("gpuhive: signal %s to kernel on %s failed: %s", name,
                     self.launch.host.name, failed)  # fmt: skip

    async def end(self) -> None:
        self._stop_ping()
        if self.channels is not None:
            await self.channels.unforward()
        if self.process is not None:
            self.process.close()
            self.process = None
        if self._reader is not None:
            self._reader.cancel()

    async def close(self) -> None:
        await self.end()
        channels = self.channels
        if channels is not None and not channels.closed():
            await self._clean_up(channels)
        if channels is not None:
            await channels.close()
        shutil.rmtree(self.local_dir, ignore_errors=True)
