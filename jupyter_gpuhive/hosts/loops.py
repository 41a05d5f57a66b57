"""Long-lived request/answer sessions ("loops") on a host, for work repeated every sweep.

A loop command reads one token per line from its stdin and answers each with its output
followed by a line `<end><token>`. Once started it costs the host no new SSH session, login
shell or `sh -c` per request: only what the answer itself needs. The token is fresh for every
request, so a late answer to an abandoned request can never be taken for the next one (and a
loop whose request timed out is ended, never reused).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any, Protocol

import asyncssh

# An answer may be large (thousands of GPU processes); asyncio's default stream limit is 64 KiB.
_ANSWER_LIMIT = 1 << 24


class Loop(Protocol):
    def alive(self) -> bool: ...

    async def send(self, token: str) -> None: ...

    async def answer(self, token: str, end: str) -> str: ...

    async def close(self) -> None: ...


class SshLoop:
    """A loop on its own session channel of a kept SSH connection."""

    def __init__(self, process: asyncssh.SSHClientProcess[str], release: Callable[[], None]):
        self.process = process
        self._release = release

    @classmethod
    async def start(
        cls, conn: asyncssh.SSHClientConnection, command: str, release: Callable[[], None]
    ) -> SshLoop:
        process = await conn.create_process(
            command, encoding="utf-8", errors="replace", stderr=asyncssh.STDOUT
        )
        return cls(process, release)

    def alive(self) -> bool:
        return not self.process.is_closing() and self.process.exit_status is None

    async def send(self, token: str) -> None:
        self.process.stdin.write(f"{token}\n")

    async def answer(self, token: str, end: str) -> str:
        separator = f"{end}{token}\n"
        text = await self.process.stdout.readuntil(separator)
        return text[: -len(separator)]

    async def close(self) -> None:
        release, self._release = self._release, _nothing
        try:
            self.process.close()
            async with asyncio.timeout(1):
                await self.process.wait_closed()
        except (TimeoutError, OSError, asyncssh.Error):
            pass
        finally:
            release()


class LocalLoop:
    """A loop as a local process in its own process group (the `local` transport)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str]) -> LocalLoop:
        process = await spawn(
            argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            limit=_ANSWER_LIMIT,
        )
        return cls(process)

    def alive(self) -> bool:
        return self.process.returncode is None

    async def send(self, token: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{token}\n".encode())
        await self.process.stdin.drain()

    async def answer(self, token: str, end: str) -> str:
        assert self.process.stdout is not None
        separator = f"{end}{token}\n".encode()
        data = await self.process.stdout.readuntil(separator)
        return data[: -len(separator)].decode(errors="replace")

    async def close(self) -> None:
        await end_group(self.process)


def _nothing() -> None:
    pass


async def spawn(argv: list[str], **options: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec(*argv, **options)` in a process group of its own, and
    safe to cancel.

    A `create_subprocess_exec` cancelled before its pipes are connected waits for them for
    ever on CPython 3.11 (python/cpython#133536): the caller's cancellation then hangs until
    an outer timeout ends it (the sampler's probes: `connect_timeout`, 5 s, which every
    server stopped in its first second paid). Here the start runs on to its end (a few ms)
    whatever cancellations arrive; a process started for a caller that was cancelled
    meanwhile is killed with its group and reaped before the cancellation goes on.
    """
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(*argv, start_new_session=True, **options)
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        await _settle(starting)
        if not starting.cancelled() and starting.exception() is None:
            await _settle(asyncio.ensure_future(end_group(starting.result())), within=3.0)
        raise


async def end_group(process: asyncio.subprocess.Process) -> None:
    """End `process` and its process group the way a shell's EXIT trap can run (the probe's
    trap removes its scratch folder; killing at once left one folder in /tmp per loop).

    End of input first (a loop's `read` ends it, as the end of an SSH session does), then
    SIGTERM to the group (a probe still running leaves through its `exit 129` trap), SIGKILL
    last. The group is signalled only while its leader, our own child, is not reaped: its pid
    (the group's id) cannot be anyone else's then; once reaped it could be reused.
    """
    stages: list[tuple[signal.Signals | None, float]] = [
        (signal.SIGTERM, 1.0),
        (signal.SIGKILL, 1.0),
    ]
    if process.stdin is not None:
        process.stdin.close()
        stages.insert(0, (None, 0.5))
    for sent, within in stages:
        if process.returncode is not None:
            return
        if sent is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sent)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await process.wait()


async def _settle(future: asyncio.Future[Any], within: float | None = None) -> None:
    """Wait until `future` is done (cancelled after `within` seconds), deaf to the caller's
    cancellations meanwhile: the caller re-raises its own afterwards."""
    loop = asyncio.get_running_loop()
    deadline = None if within is None else loop.time() + within
    while not future.done():
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            future.cancel()
            return
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({future}, timeout=left)
