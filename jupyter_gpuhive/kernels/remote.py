"""Starting a kernel process on a GPU host as a user, and reaching its sockets safely.

Over SSH (`SshKernel`) the kernel runs in a session of its own connection (the pool's key and
known hosts, keepalive every second, so a silent host is noticed in about 4 s). Its ZMQ
sockets are Unix sockets in a 0700 directory on the host, reachable only by its owner (and
root); the server reaches them through SSH forwards that end in Unix sockets in a 0700
directory of the server's own user. No TCP port is opened for the kernel on either machine,
so nothing on the network, and no other local user of either machine, can connect to it; the
HMAC key (sent on stdin, kept in 0600 files) still signs every message.

The `local` transport is `local.py`.

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
from dataclasses import replace
from typing import Any

import asyncssh

from ..errors import Unavailable
from ..hosts.pool import HostPool
from ..hosts.ssh import address, connect, explain
from . import images, launch_script
from .launch import PORTS, SCRIPT, Launch, LaunchError, Output, describe_failure, shell_command

log = logging.getLogger(__name__)

KEEPALIVE = 1.0  # seconds between SSH keepalives of a kernel's connection
KEEPALIVE_MISSES = 3
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


class SshKernel(KernelProcess):
    """A kernel in an SSH session of its own connection, its sockets forwarded."""

    def __init__(self, launch: Launch, pool: HostPool) -> None:
        super().__init__(launch)
        self.pool = pool
        self.conn: asyncssh.SSHClientConnection | None = None
        self.process: asyncssh.SSHClientProcess[str] | None = None
        self.local_dir = tempfile.mkdtemp(prefix="gpuhive-k-")  # 0700, the server's user
        self.listeners: list[asyncssh.SSHListener] = []
        self._closing = False
        self._reader: asyncio.Task[None] | None = None
        self._watcher: asyncio.Future[None] | None = None

    @property
    def address(self) -> str:
        return os.path.join(self.local_dir, launch_script.SOCKET_NAME)

    async def _connect(self) -> asyncssh.SSHClientConnection:
        if self.conn is not None and not self.conn.is_closed():
            return self.conn
        decl, user = self.launch.host, self.launch.user
        settings = replace(self.pool.settings, keepalive_interval=KEEPALIVE,
                           keepalive_count_max=KEEPALIVE_MISSES)  # fmt: skip
        try:
            async with asyncio.timeout(settings.connect_timeout):
                conn = await connect(decl, user, settings)
        except (asyncssh.Error, OSError, TimeoutError) as error:
            reason = explain(decl, user, error, settings.connect_timeout)
            raise Unavailable(f"Cannot start a kernel on {decl.name}: {reason}") from None
        self.conn, self._closing = conn, False
        self._watcher = asyncio.ensure_future(self._watch(conn))
        return conn

    async def _watch(self, conn: asyncssh.SSHClientConnection) -> None:
        with contextlib.suppress(Exception):
            await conn.wait_closed()
        if conn is self.conn and not self._closing:
            self.lost = (
                f"the SSH connection to {self.launch.host.name} ({address(self.launch.host)}) "
                "was lost: sshd stopped, the host went down or the network dropped it"
            )
            log.warning("gpuhive: kernel on %s: %s", self.launch.host.name, self.lost)
            if self.on_lost is not None:
                await self.on_lost(self.lost)

    async def start(self, launch: Launch) -> None:
        self.launch = launch
        conn = await self._connect()
        output = Output()
        line = shell_command(launch.python)
        if launch.image is not None:  # a fresh container and folder each launch
            await self._clean_up(conn)
            self.dir, line = None, images.command(launch, None)
        try:
            process = await conn.create_process(line, stderr=asyncssh.STDOUT, encoding="utf-8")
        except (asyncssh.Error, OSError) as error:
            raise Unavailable(f"Cannot start a kernel on {launch.host.name}: {error}") from None
        self.process = process
        process.stdin.write(self._stdin(launch))
        self._reader = asyncio.ensure_future(self._read(process, output))
        said = await self._await_ready(output, lambda: process.returncode)
        # The host's values, acted on only as the user over SSH (kill, rm, forwards).
        pid, pgid, folder = said.get("pid"), said.get("pgid"), said.get("dir")
        if not (_number(pid) and _number(pgid) and isinstance(folder, str)
                and folder.startswith("/") and "\n" not in folder):  # fmt: skip
            raise LaunchError(f"The kernel on {launch.host.name} gave no usable address.")
        self.pid, self.pgid, self.dir = pid, pgid, folder
        await self._forward(conn)
        self._start_ping()

    async def _clean_up(self, conn: asyncssh.SSHClientConnection) -> None:
        """Remove the last launch's folder (and its container, in an image) as the user."""
        lines = [f"rm -rf -- {shlex.quote(self.dir)}"] if self.dir else []
        if self.launch.image is not None:
            lines.append(images.remove_command(self.launch) or "true")
        if lines:
            with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
                async with asyncio.timeout(30):
                    await conn.run("; ".join(lines), check=False)

    def _write(self, data: str) -> None:
        if self.process is not None:
            self.process.stdin.write(data)

    async def _read(self, process: asyncssh.SSHClientProcess[str], output: Output) -> None:
        try:
            async for line in process.stdout:
                output.line(line.rstrip("\n"))
        except (asyncssh.Error, OSError):
            pass
        output.ended()

    async def _forward(self, conn: asyncssh.SSHClientConnection) -> None:
        await self._unforward()
        assert self.dir is not None
        for port in PORTS.values():
            local = f"{self.address}-{port}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)  # left by a restart (the kernel manager cleans only some)
            remote = f"{self.dir}/{launch_script.SOCKET_NAME}-{port}"
            self.listeners.append(await conn.forward_local_path(local, remote))

    async def _unforward(self) -> None:
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()

    def exit_status(self) -> int | None:
        if self.process is None:
            return 0
        code = self.process.returncode
        if code is not None:
            return code
        if self.lost is not None or self.conn is None or self.conn.is_closed():
            return 255
        return None

    async def signal(self, signum: int) -> None:
        if self.pgid is None or self.conn is None or self.conn.is_closed():
            return
        name = signals.Signals(signum).name.removeprefix("SIG")
        command = f"kill -s {name} -- -{int(self.pgid)}"
        if self.launch.image is not None:  # its pid is the container's: through the engine
            command = images.signal_line(self.launch, name)
        try:
            async with asyncio.timeout(self.pool.settings.command_timeout):
                await self.conn.run(command, check=False)
        except (asyncssh.Error, OSError, TimeoutError) as error:
            log.info("gpuhive: signal %s to kernel on %s failed: %s", name,
                     self.launch.host.name, error)  # fmt: skip

    async def end(self) -> None:
        self._stop_ping()
        await self._unforward()
        if self.process is not None:
            self.process.close()
            self.process = None
        if self._reader is not None:
            self._reader.cancel()

    async def close(self) -> None:
        await self.end()
        conn, self._closing = self.conn, True
        if conn is not None and not conn.is_closed():
            await self._clean_up(conn)
        if conn is not None:
            conn.close()
        shutil.rmtree(self.local_dir, ignore_errors=True)
