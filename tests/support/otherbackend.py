"""A second host backend, written only against the seam (`hosts.backends`): this machine
through `setpriv` (not runuser), and kernels through channels of its own (a child process
and symlinks to the kernel's sockets, no SSH, no `local.py`). Registered at run time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd

from jupyter_gpuhive.hosts.backends import HostBackend, KernelBooking, KernelChannels, Session
from jupyter_gpuhive.hosts.backends.sessions import ProcessSession
from jupyter_gpuhive.hosts.environment import command_env
from jupyter_gpuhive.hosts.loops import LocalLoop, Loop, end_group, spawn
from jupyter_gpuhive.hosts.status import CommandResult, HostUnavailable
from jupyter_gpuhive.model import HostDecl

NAME = "setpriv"


class SetprivBackend(HostBackend):
    """Commands as `setpriv --reuid --regid --init-groups sh -c`, from a clean environment."""

    name = NAME
    clean_start = True
    needs_address = False

    def argv(self, command: str, user: str) -> list[str]:
        if user == self.me:
            return ["sh", "-c", command]
        account = pwd.getpwnam(user)
        return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
                "--init-groups", "--", "sh", "-c", command]  # fmt: skip

    async def run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        pipe = asyncio.subprocess.PIPE
        try:
            process = await spawn(self.argv(command, user), stdin=pipe, stdout=pipe,
                                  stderr=pipe, env=command_env(decl, user))  # fmt: skip
        except (OSError, KeyError) as error:
            raise HostUnavailable(decl.name, f"setpriv could not start: {error}") from None
        try:
            async with asyncio.timeout(timeout):
                out, err = await process.communicate((stdin or "").encode())
        except TimeoutError:
            await end_group(process)
            raise HostUnavailable(decl.name, f"no answer within {timeout:.0f} s") from None
        code = process.returncode if process.returncode is not None else -1
        return CommandResult(max(code, -1), out.decode(errors="replace"),
                             err.decode(errors="replace"))  # fmt: skip

    async def start_loop(
        self, decl: HostDecl, command: str, user: str, slot: asyncio.Semaphore
    ) -> Loop:
        return await LocalLoop.start(self.argv(command, user), command_env(decl, user))

    def loop_failed(
        self, decl: HostDecl, user: str, error: BaseException, limit: float, started: bool
    ) -> str:
        return f"the setpriv loop failed: {type(error).__name__}"

    async def open_channels(
        self, decl: HostDecl, user: str, booking: KernelBooking | None = None
    ) -> KernelChannels:
        return ChildChannels(self, decl, user)


class ChildChannels(KernelChannels):
    """A kernel's channels on this machine: a child process, symlinks as forwards."""

    def __init__(self, backend: SetprivBackend, decl: HostDecl, user: str) -> None:
        self.backend, self.decl, self.user = backend, decl, user
        self.links: list[str] = []
        self.children: list[asyncio.subprocess.Process] = []
        self._closed = False

    async def start(self, line: str) -> Session:
        pipe = asyncio.subprocess.PIPE
        process = await spawn(self.backend.argv(line, self.user), stdin=pipe, stdout=pipe,
                              stderr=asyncio.subprocess.STDOUT,
                              env=command_env(self.decl, self.user))  # fmt: skip
        self.children.append(process)
        return ProcessSession(process)

    async def forward(self, local: str, remote: str) -> None:
        os.symlink(remote, local)
        self.links.append(local)

    async def unforward(self) -> None:
        for link in self.links:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
        self.links.clear()

    async def run(self, command: str, timeout: float) -> str | None:
        try:
            await self.backend.run(self.decl, command, self.user, timeout, None)
        except HostUnavailable as error:
            return error.reason
        return None

    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        self._closed = True
        await self.unforward()
        for child in self.children:
            await end_group(child)
