"""The local backend: this machine, commands as `sh -c` children of this server, as their
user through runuser, with an explicit environment (never the server's own)."""

from __future__ import annotations

import asyncio
import contextlib
import os

from ...model import HostDecl
from ..environment import command_env
from ..loops import LocalLoop, Loop, end_group, spawn
from ..status import CommandResult, HostUnavailable
from . import HostBackend, last_words


class LocalBackend(HostBackend):
    """This machine: processes are our children, kernels' sockets are reached directly."""

    name = "local"
    runs_here = True
    clean_start = True
    needs_address = False

    def argv(self, decl: HostDecl, command: str, user: str) -> list[str]:
        """`sh -c command` on this machine, as `user` (through runuser when not us)."""
        argv = ["sh", "-c", command]
        if user != self.me:
            if os.geteuid() != 0:
                raise HostUnavailable(decl.name, f"cannot run as {user} without root")
            argv = ["runuser", "-u", user, "--", *argv]
        return argv

    async def run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        env = command_env(decl, user)  # never the server's own environment
        argv = self.argv(decl, command, user)
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

    async def start_loop(
        self, decl: HostDecl, command: str, user: str, slot: asyncio.Semaphore
    ) -> Loop:
        env = command_env(decl, user)  # never the server's own environment
        argv = self.argv(decl, command, user)
        try:
            return await LocalLoop.start(argv, env)
        except (OSError, ValueError) as error:
            raise HostUnavailable(decl.name, f"cannot start the local command: {error}") from None

    def loop_failed(
        self, decl: HostDecl, user: str, error: BaseException, limit: float, started: bool
    ) -> str:
        if isinstance(error, TimeoutError):
            return f"no answer from the local command within {limit:.0f} s"
        if isinstance(error, EOFError | OSError):
            return f"the local command ended: {last_words(getattr(error, 'partial', None))}"
        return f"cannot start the local command: {error}"

    @classmethod
    def where(cls, decl: HostDecl, user: str) -> str:
        return f"this machine (local), as {user}"
