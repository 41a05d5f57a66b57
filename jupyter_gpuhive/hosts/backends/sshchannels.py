"""A reservation kernel's channels over SSH: a session for its process, Unix-socket forwards
to its sockets, commands as its user; on connections the SSH backend keeps for kernels."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncssh

from ...model import HostDecl
from ..ssh import address
from ..status import HostUnavailable
from . import KernelChannels, Session

log = logging.getLogger(__name__)

# sshd allows 10 sessions per connection: each kernel holds one and briefly a second (a
# signal, a clean-up), so a connection carries a few kernels, never enough to be refused.
KERNELS_PER_CONNECTION = 4

Connect = Callable[[HostDecl, str], Awaitable[asyncssh.SSHClientConnection]]


class KernelConnections:
    """The connections kernels use, per (host, account), each lent to a few kernels."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._lent: dict[tuple[str, str], dict[asyncssh.SSHClientConnection, int]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def take(self, decl: HostDecl, user: str) -> asyncssh.SSHClientConnection:
        """A live connection with room for one more kernel (a new one if none has)."""
        key = (decl.name, user)
        async with self._locks.setdefault(key, asyncio.Lock()):
            lent = self._lent.setdefault(key, {})
            for conn in [c for c in lent if c.is_closed()]:
                del lent[conn]
            roomy = [c for c, n in lent.items() if n < KERNELS_PER_CONNECTION]
            conn = roomy[0] if roomy else await self._connect(decl, user)
            lent[conn] = lent.get(conn, 0) + 1
            return conn

    def give_back(self, decl: HostDecl, user: str, conn: asyncssh.SSHClientConnection) -> None:
        """A kernel lets go of `conn`; the last one to let go closes it."""
        lent = self._lent.get((decl.name, user), {})
        left = lent.get(conn, 1) - 1
        if left > 0:
            lent[conn] = left
            return
        lent.pop(conn, None)
        conn.close()

    async def close(self) -> None:
        for lent in self._lent.values():
            for conn in lent:
                conn.close()
        self._lent.clear()


class SshSession:
    """A kernel's process in an SSH session."""

    def __init__(self, process: asyncssh.SSHClientProcess[str]) -> None:
        self.process = process

    def write(self, data: str) -> None:
        self.process.stdin.write(data)

    async def lines(self) -> AsyncIterator[str]:
        with contextlib.suppress(asyncssh.Error, OSError):
            async for line in self.process.stdout:
                yield line.rstrip("\n")

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def close(self) -> None:
        self.process.close()


class SshChannels(KernelChannels):
    """One kernel's channels on a lent connection; its loss is told through `on_lost`."""

    def __init__(
        self, decl: HostDecl, conn: asyncssh.SSHClientConnection, release: Callable[[], None]
    ) -> None:
        self.decl, self.conn, self._release = decl, conn, release
        self.lost: str | None = None
        self.listeners: list[asyncssh.SSHListener] = []
        self._closing = False
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        with contextlib.suppress(Exception):
            await self.conn.wait_closed()
        if not self._closing:
            self.lost = (
                f"the SSH connection to {self.decl.name} ({address(self.decl)}) "
                "was lost: sshd stopped, the host went down or the network dropped it"
            )
            log.warning("gpuhive: kernel on %s: %s", self.decl.name, self.lost)
            if self.on_lost is not None:
                await self.on_lost(self.lost)

    async def start(self, line: str) -> Session:
        try:
            process = await self.conn.create_process(line, stderr=asyncssh.STDOUT, encoding="utf-8")
        except (asyncssh.Error, OSError) as error:
            raise HostUnavailable(self.decl.name, str(error)) from None
        return SshSession(process)

    async def forward(self, local: str, remote: str) -> None:
        self.listeners.append(await self.conn.forward_local_path(local, remote))

    async def unforward(self) -> None:
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()

    async def run(self, command: str, timeout: float) -> str | None:
        try:
            async with asyncio.timeout(timeout):
                await self.conn.run(command, check=False)
        except (asyncssh.Error, OSError, TimeoutError) as error:
            return str(error) or type(error).__name__
        return None

    def closed(self) -> bool:
        return self.lost is not None or self.conn.is_closed()

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        await self.unforward()
        self._watcher.cancel()
        self._release()
