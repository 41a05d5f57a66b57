"""HostPool: every GPU host through its backend (`backends`: SSH, local, a site's own).

The pool keeps what is the same for every backend: a host's state (up, down, its backoff),
the cap on commands per host, and the long-lived loops; the backend does the rest. Facts
that shape it (measured here): sshd allows 10 sessions per connection, so commands
per host are capped; `conn.run(timeout=…)` does not bound a silently dropped host, so every
remote operation runs under `asyncio.timeout`; a host that fails is marked down and is not
tried again before its backoff expires, so a dead host never delays a sweep.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import random
import secrets
import time
from collections.abc import Iterable

from ..model import HostDecl, utcnow
from ..model.engines import ReservationEngine
from .backends import HostBackend, backend_class
from .loops import Loop
from .probe import HostSample
from .ssh import SshSettings as SshSettings
from .status import CommandResult as CommandResult
from .status import HostStatus as HostStatus
from .status import HostUnavailable as HostUnavailable

log = logging.getLogger(__name__)


CLOSED = "gpuhive closed its host connections"


class HostPool:
    """Runs commands on hosts over persistent connections, one state per host."""

    def __init__(self, hosts: Iterable[HostDecl], settings: SshSettings | None = None) -> None:
        self.settings = settings or SshSettings()
        self.hosts: dict[str, HostDecl] = {h.name: h for h in hosts}
        self._status = {name: HostStatus(name) for name in self.hosts}
        self._backends: dict[str, HostBackend] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._loops: dict[tuple[str, str], Loop] = {}
        self._loop_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._answers: set[asyncio.Future[str]] = set()  # answers awaited now (close ends them)
        self._closed = False  # after close nothing starts anew (a leak past the server's end)
        self._me = getpass.getuser()

    # --- backends --------------------------------------------------------------------

    def backend_of(self, decl: HostDecl) -> HostBackend:
        """The backend that reaches `decl` (one per kind, shared by its hosts)."""
        backend = self._backends.get(decl.transport)
        if backend is None:
            backend = backend_class(decl.transport)(self.settings, self._me)
            self._backends[decl.transport] = backend
        return backend

    def backend(self, host: str) -> HostBackend:
        """The backend of configured host `host`."""
        decl = self.hosts.get(host)
        if decl is None:
            raise HostUnavailable(host, "no such host in the configuration")
        return self.backend_of(decl)

    def engine_of(self, host: str) -> tuple[str, ReservationEngine] | None:
        """(the host's name there, the engine) where an engine mirrors bookings on `host`."""
        decl = self.hosts.get(host)
        return self.backend_of(decl).reservations(decl) if decl is not None else None

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
        decl = self._decl(host)
        timeout = timeout or self.settings.command_timeout
        as_user = user or decl.user or self._me
        tracked = user is None or user == (decl.user or self._me)
        st = self._status[host]
        if tracked and st.state == "down" and time.monotonic() < st.retry_at:
            raise HostUnavailable(host, st.error or "down")
        async with self._slot(decl):
            try:
                result = await self.backend_of(decl).run(decl, command, as_user, timeout, stdin)
            except HostUnavailable as error:
                if tracked:
                    self._fail(host, error.reason)
                raise
        if tracked:
            self._ok(host)
        return result

    async def sample(self, host: str, timeout: float) -> HostSample:
        """The sample of a host whose backend `samples_itself`; its state follows, like `run`."""
        decl = self._decl(host)
        try:
            async with asyncio.timeout(timeout):
                found = await self.backend_of(decl).sample(decl, timeout)
        except TimeoutError:
            self._fail(host, f"no answer within {timeout:.0f} s")
            raise HostUnavailable(host, f"no answer within {timeout:.0f} s") from None
        except HostUnavailable as error:
            self._fail(host, error.reason)
            raise
        self._ok(host)
        return found

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
        decl = self._decl(host)
        timeout = timeout or self.settings.command_timeout
        st = self._status[host]
        if st.state == "down" and time.monotonic() < st.retry_at:
            raise HostUnavailable(host, st.error or "down")
        key = (host, command)
        async with self._loop_locks.setdefault(key, asyncio.Lock()):
            try:
                answer = await self._ask(decl, key, end, timeout, say)
            except HostUnavailable as error:
                if not self._closed:  # the host did nothing wrong when the pool closed
                    self._fail(host, error.reason)
                raise
        self._ok(host)
        return answer

    async def _ask(
        self, decl: HostDecl, key: tuple[str, str], end: str, timeout: float, say: str
    ) -> str:
        user = decl.user or self._me
        backend = self.backend_of(decl)
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
                        loop = await backend.start_loop(decl, key[1], user, self._slot(decl))
                    self._loops[key] = loop
                limit = timeout
                async with asyncio.timeout(limit):
                    await loop.send(f"{token} {say}" if say else token)
                    sent = True
                    return await self._answer(loop, token, end)
            except asyncio.CancelledError:
                await self._end_loop(key)  # an answer may still be on its way: never reuse it
                current = asyncio.current_task()
                if current is not None and not current.cancelling():  # close() ended the wait
                    raise HostUnavailable(decl.name, CLOSED) from None
                raise
            except HostUnavailable:
                raise
            except backend.failures as error:
                await self._end_loop(key)
                reason = backend.loop_failed(decl, user, error, limit, loop is not None)
                if attempt == 1 and kept and not sent and not isinstance(error, TimeoutError):
                    continue  # the kept loop (or its connection) died since its last answer and
                    # the request never left: a fresh one is tried at once
                raise HostUnavailable(decl.name, reason) from None
        raise AssertionError("unreachable")

    async def _answer(self, loop: Loop, token: str, end: str) -> str:
        """Wait for a loop's answer where `close` can end the wait at once (a hung tool must
        not hold a closing server for the ask's whole timeout)."""
        waiting = asyncio.ensure_future(loop.answer(token, end))
        self._answers.add(waiting)
        try:
            return await waiting
        finally:
            self._answers.discard(waiting)

    def _decl(self, host: str) -> HostDecl:
        if self._closed:
            raise HostUnavailable(host, CLOSED)
        decl = self.hosts.get(host)
        if decl is None:
            raise HostUnavailable(host, "no such host in the configuration")
        return decl

    def _slot(self, decl: HostDecl) -> asyncio.Semaphore:
        return self._slots.setdefault(decl.name, asyncio.Semaphore(self.settings.max_sessions))

    async def _end_loop(self, key: tuple[str, str]) -> None:
        loop = self._loops.pop(key, None)
        if loop is not None:
            await loop.close()

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
        for name in stale:
            for backend in self._backends.values():
                await backend.forget(name)

    async def close(self) -> None:
        """End every loop and close every connection; asks waiting for an answer fail at once
        (HostUnavailable), and later calls are refused."""
        self._closed = True
        for waiting in list(self._answers):
            waiting.cancel()
        for key in list(self._loops):
            await self._end_loop(key)
        for backend in self._backends.values():
            await backend.close()
