"""HostPool: persistent SSH connections (or local processes) to every GPU host.

Facts that shape it (measured here): sshd allows 10 sessions per connection, so commands
per host are capped; `conn.run(timeout=…)` does not bound a silently dropped host, so every
remote operation runs under `asyncio.timeout`; a host that fails is marked down and is not
tried again before its backoff expires, so a dead host never delays a sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import random
import secrets
import time
from collections.abc import Iterable

import asyncssh

from ..model import HostDecl, utcnow
from .environment import command_env
from .keycheck import key_problem
from .loops import LocalLoop, Loop, SshLoop, end_group, spawn
from .ssh import SshSettings as SshSettings
from .ssh import address, as_text, connect, explain, run_session
from .status import CommandResult as CommandResult
from .status import HostStatus as HostStatus
from .status import HostUnavailable as HostUnavailable

log = logging.getLogger(__name__)


class HostPool:
    """Runs commands on hosts over persistent connections, one state per host."""

    def __init__(self, hosts: Iterable[HostDecl], settings: SshSettings | None = None) -> None:
        self.settings = settings or SshSettings()
        self.hosts: dict[str, HostDecl] = {h.name: h for h in hosts}
        self._status = {name: HostStatus(name) for name in self.hosts}
        self._conns: dict[tuple[str, str], asyncssh.SSHClientConnection] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._loops: dict[tuple[str, str], Loop] = {}
        self._loop_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._me = getpass.getuser()

    # --- state ---------------------------------------------------------------------

    def status(self, host: str) -> HostStatus:
        return self._status[host]

    def statuses(self) -> dict[str, HostStatus]:
        return dict(self._status)

    def _ok(self, host: str) -> None:
        st = self._status[host]
        now = utcnow()
        if st.state != "up":
            st.since = now
            if st.state == "down":
                log.info("gpuhive: host %s is back", host)
        st.state, st.error, st.failures, st.retry_at, st.last_ok = "up", None, 0, 0.0, now

    def _fail(self, host: str, reason: str) -> None:
        st = self._status[host]
        if st.state != "down":
            st.since = utcnow()
            log.warning("gpuhive: host %s is down: %s", host, reason)
        st.state, st.error = "down", reason
        st.failures += 1
        s = self.settings
        delay = min(s.backoff_max, s.backoff_initial * 2 ** (st.failures - 1))
        st.retry_at = time.monotonic() + delay * random.uniform(0.8, 1.2)

    # --- running commands -------------------------------------------------------------

    async def run(
        self,
        host: str,
        command: str,
        *,
        user: str | None = None,
        timeout: float | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run `command` on `host` (as `user`, default the host's account); never hangs."""
        decl = self.hosts.get(host)
        if decl is None:
            raise HostUnavailable(host, "no such host in the configuration")
        timeout = timeout or self.settings.command_timeout
        as_user = user or decl.user or self._me
        tracked = user is None or user == (decl.user or self._me)
        st = self._status[host]
        if tracked and st.state == "down" and time.monotonic() < st.retry_at:
            raise HostUnavailable(host, st.error or "down")
        slot = self._slots.setdefault(host, asyncio.Semaphore(self.settings.max_sessions))
        async with slot:
            try:
                if decl.transport == "local":
                    result = await self._run_local(decl, command, as_user, timeout, stdin)
                else:
                    result = await self._run_ssh(decl, command, as_user, timeout, stdin)
            except HostUnavailable as error:
                if tracked:
                    self._fail(host, error.reason)
                raise
        if tracked:
            self._ok(host)
        return result

    async def run_all(
        self, command: str, timeout: float | None = None
    ) -> dict[str, CommandResult | HostUnavailable]:
        """Run `command` on every host concurrently; failures are returned, not raised."""

        async def one(name: str) -> CommandResult | HostUnavailable:
            try:
                return await self.run(name, command, timeout=timeout)
            except HostUnavailable as error:
                return error

        names = list(self.hosts)
        results = await asyncio.gather(*(one(n) for n in names))
        return dict(zip(names, results, strict=True))

    async def ask(
        self, host: str, command: str, *, end: str, timeout: float | None = None, say: str = ""
    ) -> str:
        """One answer from a long-lived `command` on `host` (see `loops`); never hangs.

        The request line is a fresh token, then `say` (if any) after a space.

        The loop is started on first use (as the host's account) and kept; a loop that ended,
        failed or overran `timeout` is ended and the next call starts a fresh one. Failures
        mark the host down exactly like `run`.
        """
        decl = self.hosts.get(host)
        if decl is None:
            raise HostUnavailable(host, "no such host in the configuration")
        timeout = timeout or self.settings.command_timeout
        st = self._status[host]
        if st.state == "down" and time.monotonic() < st.retry_at:
            raise HostUnavailable(host, st.error or "down")
        key = (host, command)
        async with self._loop_locks.setdefault(key, asyncio.Lock()):
            try:
                answer = await self._ask(decl, key, end, timeout, say)
            except HostUnavailable as error:
                self._fail(host, error.reason)
                raise
        self._ok(host)
        return answer

    async def _ask(
        self, decl: HostDecl, key: tuple[str, str], end: str, timeout: float, say: str
    ) -> str:
        user = decl.user or self._me
        for attempt in (1, 2):
            loop = self._loops.get(key)
            if loop is not None and not loop.alive():  # it ended since its last answer
                await self._end_loop(key)
                loop = None
            kept, sent = loop is not None, False
            limit = self.settings.connect_timeout
            token = secrets.token_hex(8)
            try:
                if loop is None:
                    async with asyncio.timeout(limit):
                        loop = await self._start_loop(decl, key[1], user)
                    self._loops[key] = loop
                limit = timeout
                async with asyncio.timeout(limit):
                    await loop.send(f"{token} {say}" if say else token)
                    sent = True
                    return await loop.answer(token, end)
            except asyncio.CancelledError:
                await self._end_loop(key)  # an answer may still be on its way: never reuse it
                raise
            except HostUnavailable:
                raise
            except (asyncssh.Error, OSError, TimeoutError, EOFError) as error:
                await self._end_loop(key)
                lost = False
                if decl.transport != "local":
                    conn = self._conns.get((decl.name, user))
                    # Lost under a running loop, not merely never made (refused, no route...).
                    lost = loop is not None and (conn is None or conn.is_closed())
                    if (
                        conn is None
                        or conn.is_closed()
                        or not isinstance(error, asyncssh.ChannelOpenError)
                    ):
                        self._drop((decl.name, user))  # as `run`: a refused session keeps others
                if attempt == 1 and kept and not sent and not isinstance(error, TimeoutError):
                    continue  # the kept loop (or its connection) died since its last answer and
                    # the request never left: a fresh one is tried at once
                raise HostUnavailable(
                    decl.name, self._loop_failure(decl, user, error, limit, lost)
                ) from None
        raise AssertionError("unreachable")

    def _loop_failure(
        self, decl: HostDecl, user: str, error: BaseException, limit: float, lost: bool
    ) -> str:
        partial = getattr(error, "partial", None)
        if decl.transport == "local":
            if isinstance(error, TimeoutError):
                return f"no answer from the local command within {limit:.0f} s"
            if isinstance(error, EOFError | OSError):
                return f"the local command ended: {_tail(partial)}"
            return f"cannot start the local command: {error}"
        if lost and not isinstance(error, TimeoutError):
            return f"the connection to {address(decl)} was lost while the command ran"
        if isinstance(error, EOFError):
            return f"the command on {address(decl)} ended: {_tail(partial)}"
        return explain(decl, user, error, limit)

    async def _start_loop(self, decl: HostDecl, command: str, user: str) -> Loop:
        if decl.transport == "local":
            env = command_env(decl, user)  # never the server's own environment
            argv = self._local_argv(decl, command, user)
            try:
                return await LocalLoop.start(argv, env)
            except (OSError, ValueError) as error:
                raise HostUnavailable(
                    decl.name, f"cannot start the local command: {error}"
                ) from None
        # A loop holds one of the host's session slots for as long as it lives.
        slot = self._slots.setdefault(decl.name, asyncio.Semaphore(self.settings.max_sessions))
        await slot.acquire()
        try:
            conn = await self._connection(decl, user)
            return await SshLoop.start(conn, command, slot.release)
        except BaseException:
            slot.release()
            raise

    async def _end_loop(self, key: tuple[str, str]) -> None:
        loop = self._loops.pop(key, None)
        if loop is not None:
            await loop.close()

    async def _connection(self, decl: HostDecl, user: str) -> asyncssh.SSHClientConnection:
        key = (decl.name, user)
        conn = self._conns.get(key)
        if conn is not None and not conn.is_closed():
            return conn
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._conns.get(key)
            if conn is not None and not conn.is_closed():
                return conn
            try:
                conn = await connect(decl, user, self.settings)
            except (ValueError, OSError) as error:  # the key files are loaded first
                problem = key_problem(self.settings.client_keys, error)
                if problem is None:
                    raise
                raise HostUnavailable(decl.name, problem) from None
            self._conns[key] = conn
            return conn

    def _drop(self, key: tuple[str, str]) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.abort()

    async def _run_ssh(
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
                    conn = await self._connection(decl, user)
                limit = timeout
                async with asyncio.timeout(limit):
                    done = await run_session(conn, command, stdin)
            except (asyncssh.Error, OSError, TimeoutError) as error:
                refused = isinstance(error, asyncssh.ChannelOpenError)
                if conn is None or conn.is_closed() or not refused:
                    self._drop(key)  # a session refused on a live connection keeps the others
                stale = conn is not None and conn is cached and conn.is_closed()
                if attempt == 1 and refused and stale:
                    continue  # the kept connection died since its last use: the command never
                    # started, so one fresh connection is tried at once
                raise HostUnavailable(decl.name, explain(decl, user, error, limit)) from None
            break
        if done.exit_status is None and done.exit_signal is None:
            # sshd always reports how a command ended; without it the connection was cut.
            self._drop(key)
            raise HostUnavailable(
                decl.name, f"the connection to {address(decl)} was lost while the command ran"
            )
        status = done.exit_status if done.exit_status is not None else -1
        return CommandResult(status, as_text(done.stdout), as_text(done.stderr))

    async def _run_local(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        env = command_env(decl, user)  # never the server's own environment
        argv = self._local_argv(decl, command, user)
        try:
            process = await spawn(
                argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except (OSError, ValueError) as error:  # no shell, no file descriptors, a bad env
            raise HostUnavailable(decl.name, f"cannot start the local command: {error}") from None
        try:
            async with asyncio.timeout(timeout):
                out, err = await process.communicate(stdin.encode() if stdin else None)
        except (TimeoutError, asyncio.CancelledError) as error:
            # TERM before KILL: the probe's EXIT trap removes its scratch folder
            ending = asyncio.ensure_future(end_group(process))
            if isinstance(error, asyncio.CancelledError):
                with contextlib.suppress(BaseException):
                    await asyncio.shield(ending)
                raise
            await ending
            raise HostUnavailable(
                decl.name, f"no answer from the local command within {timeout:.0f} s"
            ) from None
        status = process.returncode if process.returncode is not None else -1
        return CommandResult(status if status >= 0 else -1, out.decode(errors="replace"),
                             err.decode(errors="replace"))  # fmt: skip

    def _local_argv(self, decl: HostDecl, command: str, user: str) -> list[str]:
        """`sh -c command` on this machine, as `user` (through runuser when not us)."""
        argv = ["sh", "-c", command]
        if user != self._me:
            if os.geteuid() != 0:
                raise HostUnavailable(decl.name, f"cannot run as {user} without root")
            argv = ["runuser", "-u", user, "--", *argv]
        return argv

    async def use_hosts(self, hosts: Iterable[HostDecl]) -> None:
        """Switch to a new host list (the hosts file changed): a host that is new or changed
        starts afresh ('unknown'); one removed or changed loses its loops and connections."""
        new = {h.name: h for h in hosts}
        old = self.hosts
        stale = {
            n for n, d in old.items() if n not in new or (d, d.extra) != (new[n], new[n].extra)
        }
        self.hosts = new
        self._status = {
            n: self._status[n] if n in old and n not in stale else HostStatus(n) for n in new
        }
        for key in [k for k in self._loops if k[0] in stale]:
            await self._end_loop(key)
        for key in [k for k in self._conns if k[0] in stale]:
            self._conns.pop(key).close()

    async def close(self) -> None:
        """End every loop and close every connection."""
        for key in list(self._loops):
            await self._end_loop(key)
        for key in list(self._conns):
            conn = self._conns.pop(key)
            conn.close()
            try:
                async with asyncio.timeout(2):
                    await conn.wait_closed()
            except (TimeoutError, OSError, asyncssh.Error):
                pass


def _tail(partial: str | bytes | None) -> str:
    """The last words a command said before it ended, for a reason shown to people."""
    text = as_text(partial).strip()
    return text[-300:] if text else "it ended without a word"
