"""The SSH backend: persistent asyncssh connections per (host, account), the one SSH stack.

Commands and loops share a connection per (host, account); reservation kernels use
connections of their own kind (keepalive every second, so a silent host is noticed in about
4 s), a few kernels to a connection so that sshd's session limit is never reached.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import asyncssh

from ...model import HostDecl
from ..keycheck import key_problem
from ..loops import Loop, SshLoop
from ..ssh import SshSettings, address, as_text, connect, explain, run_session
from ..status import CommandResult, HostUnavailable
from . import HostBackend, KernelBooking, KernelChannels, last_words
from .sshchannels import KernelConnections, SshChannels

Key = tuple[str, str]


class SshBackend(HostBackend):
    """Hosts reached over SSH as each account; the host's sshd builds the environment."""

    name = "ssh"
    uses_ssh_keys = True
    failures = (asyncssh.Error, OSError, TimeoutError, EOFError)

    def __init__(self, settings: SshSettings, me: str) -> None:
        super().__init__(settings, me)
        self._conns: dict[Key, asyncssh.SSHClientConnection] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        self.kernel_conns = KernelConnections(self._kernel_connect)

    # --- connections ---------------------------------------------------------------------

    async def connection(self, decl: HostDecl, user: str) -> asyncssh.SSHClientConnection:
        """The kept connection to `decl` as `user`, made on first use."""
        key = (decl.name, user)
        conn = self._conns.get(key)
        if conn is not None and not conn.is_closed():
            return conn
        async with self._locks.setdefault(key, asyncio.Lock()):
            conn = self._conns.get(key)
            if conn is not None and not conn.is_closed():
                return conn
            conn = await self._connect(decl, user, self.settings)
            self._conns[key] = conn
            return conn

    async def _connect(
        self, decl: HostDecl, user: str, settings: SshSettings
    ) -> asyncssh.SSHClientConnection:
        try:
            return await connect(decl, user, settings)
        except (ValueError, OSError) as error:  # the key files are loaded first
            problem = key_problem(self.settings.client_keys, error)
            if problem is None:
                raise
            raise HostUnavailable(decl.name, problem) from None

    def drop(self, key: Key) -> None:
        """Abort the kept connection of `key` (a broken one is never reused)."""
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.abort()

    @property
    def connections(self) -> dict[Key, asyncssh.SSHClientConnection]:
        """The kept connections by (host, account)."""
        return self._conns

    # --- commands and loops ------------------------------------------------------------

    async def run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        key = (decl.name, user)
        for attempt in (1, 2):
            cached = self._conns.get(key)
            # Connecting and running are bounded separately: a command that hangs on an open
            # connection gives up after `timeout`, not `connect_timeout + timeout`.
            limit = self.settings.connect_timeout
            conn = None
            try:
                async with asyncio.timeout(limit):
                    conn = await self.connection(decl, user)
                limit = timeout
                async with asyncio.timeout(limit):
                    done = await run_session(conn, command, stdin)
            except (asyncssh.Error, OSError, TimeoutError) as error:
                refused = isinstance(error, asyncssh.ChannelOpenError)
                if conn is None or conn.is_closed() or not refused:
                    self.drop(key)  # a session refused on a live connection keeps the others
                stale = conn is not None and conn is cached and conn.is_closed()
                if attempt == 1 and refused and stale:
                    continue  # the kept connection died since its last use: the command never
                    # started, so one fresh connection is tried at once
                raise HostUnavailable(decl.name, explain(decl, user, error, limit)) from None
            break
        if done.exit_status is None and done.exit_signal is None:
            # sshd always reports how a command ended; without it the connection was cut.
            self.drop(key)
            raise HostUnavailable(
                decl.name, f"the connection to {address(decl)} was lost while the command ran"
            )
        status = done.exit_status if done.exit_status is not None else -1
        return CommandResult(status, as_text(done.stdout), as_text(done.stderr))

    async def start_loop(
        self, decl: HostDecl, command: str, user: str, slot: asyncio.Semaphore
    ) -> Loop:
        # A loop holds one of the host's session slots for as long as it lives.
        await slot.acquire()
        try:
            conn = await self.connection(decl, user)
            return await SshLoop.start(conn, command, slot.release)
        except BaseException:
            slot.release()
            raise

    def loop_failed(
        self, decl: HostDecl, user: str, error: BaseException, limit: float, started: bool
    ) -> str:
        key = (decl.name, user)
        conn = self._conns.get(key)
        # Lost under a running loop, not merely never made (refused, no route...).
        lost = started and (conn is None or conn.is_closed())
        if conn is None or conn.is_closed() or not isinstance(error, asyncssh.ChannelOpenError):
            self.drop(key)  # as `run`: a refused session keeps the others
        if lost and not isinstance(error, TimeoutError):
            return f"the connection to {address(decl)} was lost while the command ran"
        if isinstance(error, EOFError):
            said = last_words(getattr(error, "partial", None))
            return f"the command on {address(decl)} ended: {said}"
        return explain(decl, user, error, limit)

    # --- kernels -------------------------------------------------------------------------

    async def _kernel_connect(self, decl: HostDecl, user: str) -> asyncssh.SSHClientConnection:
        settings = replace(self.settings, keepalive_interval=1.0, keepalive_count_max=3)
        try:
            async with asyncio.timeout(settings.connect_timeout):
                return await self._connect(decl, user, settings)
        except (asyncssh.Error, OSError, TimeoutError) as error:
            raise HostUnavailable(
                decl.name, explain(decl, user, error, settings.connect_timeout)
            ) from None

    async def open_channels(
        self, decl: HostDecl, user: str, booking: KernelBooking | None = None
    ) -> KernelChannels:
        conn = await self.kernel_conns.take(decl, user)
        return SshChannels(decl, conn, lambda: self.kernel_conns.give_back(decl, user, conn))

    # --- words ---------------------------------------------------------------------------

    @classmethod
    def where(cls, decl: HostDecl, user: str) -> str:
        return f"ssh {user}@{decl.address}:{decl.port}"

    @classmethod
    def attach_hint(cls, decl: HostDecl, account: str, argv: list[str]) -> list[str]:
        ssh = ["ssh", "-t"]
        if decl.port != 22:
            ssh += ["-p", str(decl.port)]
        return [*ssh, f"{account}@{decl.address}", *argv]

    # --- letting go ----------------------------------------------------------------------

    async def forget(self, host: str) -> None:
        for key in [k for k in self._conns if k[0] == host]:
            self._conns.pop(key).close()

    async def close(self) -> None:
        for key in list(self._conns):
            conn = self._conns.pop(key)
            conn.close()
            try:
                async with asyncio.timeout(2):
                    await conn.wait_closed()
            except (TimeoutError, OSError, asyncssh.Error):
                pass
        await self.kernel_conns.close()
