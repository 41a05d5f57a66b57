"""A kernel on this machine (the `local` transport), started as its user by this server.

Everything this server later does to the kernel with its own rights (root, in team mode or
one server for several UNIX users) rests on what it knows itself, never on the kernel's
output, which the user controls (a ``json.py`` in their home, PYTHONPATH, a sitecustomize):

- the process: the child it started (``start_new_session``: its pid is its process group);
  a signal goes to that group only while the child is unreaped and /proc says it is still
  the user's;
- the sockets: a directory this server makes (``sockdirs``) and lends to the user for each
  launch; once the kernel says it is ready the directory is taken back (ours, 0711) and must
  hold the five sockets, the user's own; only then do fixed links in this server's own
  directory (the address the notebooks connect to) point at them;
- the clean-up: only that directory, checked again before it is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import tempfile
from pathlib import Path
from typing import Any

from ..hosts.environment import command_env
from ..hosts.loops import spawn
from . import images, launch_script, sockdirs
from .launch import PORTS, Launch, LaunchError, Output, shell_command
from .remote import KernelProcess

NAMES = [f"{launch_script.SOCKET_NAME}-{port}" for port in PORTS.values()]


def owned_by(pid: int, uid: int) -> bool:
    """Whether process `pid` runs as `uid` (real and effective) and leads its process group."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            line = next((x for x in status if x.startswith("Uid:")), "")
        leads = os.getpgid(pid) == pid
    except (OSError, StopIteration):
        return False
    ids = line.split()[1:3]
    return leads and ids == [str(uid), str(uid)]


class LocalKernel(KernelProcess):
    """A kernel started on this machine as the user, its sockets reached through our links."""

    def __init__(self, launch: Launch) -> None:
        super().__init__(launch)
        self.process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self.base: str | None = None  # ours: the links, and each launch's directory
        self.parent = ""  # where `base` was made
        self.uid = -1
        self.ids: dict[str, Any] = {}  # the owner's uid, gid and groups for subprocesses
        self.boxed: Launch | None = None  # the last launch that ran in an image

    @property
    def address(self) -> str:
        assert self.base is not None
        return os.path.join(self.base, launch_script.SOCKET_NAME)

    async def start(self, launch: Launch) -> None:
        self.launch = launch
        try:
            account = pwd.getpwnam(launch.user)
        except KeyError:
            raise LaunchError(f"There is no UNIX user {launch.user} on this machine.") from None
        ids: dict[str, Any] = {}
        if account.pw_uid != os.geteuid():
            if os.geteuid() != 0:
                raise LaunchError(f"Cannot start a kernel as {launch.user} without root.")
            ids = {"user": account.pw_uid, "group": account.pw_gid,
                   "extra_groups": os.getgrouplist(account.pw_name, account.pw_gid)}  # fmt: skip
        self.uid = account.pw_uid
        self.ids = ids
        await self._remove_container()  # a restart: the last launch's container goes first
        self._lend(account.pw_uid, account.pw_gid)
        assert self.dir is not None
        line = shell_command(launch.python)
        if launch.image is not None:
            line = images.command(launch, self.dir)
            self.boxed = launch
        env = command_env(launch.host, launch.user)  # never the server's environment
        home = account.pw_dir if Path(account.pw_dir).is_dir() else "/"  # noqa: ASYNC240
        try:
            # a session of its own (spawn), and a start that a cancellation cannot hang
            process = await spawn(
                ["sh", "-c", line], env=env, cwd=home,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, **ids,
            )  # fmt: skip
        except (OSError, ValueError) as error:
            raise LaunchError(f"Cannot start a kernel on {launch.host.name}: {error}") from None
        self.process = process
        self.pid = self.pgid = process.pid  # a session of its own: its group is its pid
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(self._stdin(launch).encode())
        output = Output()
        self._reader = asyncio.ensure_future(self._read(process.stdout, output))
        await self._await_ready(output, lambda: process.returncode)  # its words: only "ready"
        self._take_back()
        self._start_ping()

    def _lend(self, uid: int, gid: int) -> None:
        """A fresh directory of ours for this launch, lent to the kernel's user (0700); the
        last launch's, taken back before, goes."""
        if self.base is None:
            self.parent = str(sockdirs.kernels_dir())
            self.base = tempfile.mkdtemp(prefix="lk-", dir=self.parent)
            os.chmod(self.base, 0o711)  # noqa: S103 - the user passes through to their own
        self._unlink()
        if self.dir is not None:  # taken back first if its launch failed before that
            with contextlib.suppress(sockdirs.NotOurs, OSError):
                os.close(sockdirs.lock(self.dir, self.base))
            sockdirs.remove(self.dir, self.base)
        self.dir = tempfile.mkdtemp(prefix="r-", dir=self.base)
        if uid != os.geteuid():
            os.chown(self.dir, uid, gid, follow_symlinks=False)

    def _take_back(self) -> None:
        """The kernel is ready: its directory is ours again, with its five sockets (the
        user's, not links); then our links point at them."""
        assert self.base is not None
        assert self.dir is not None
        where = self.launch.host.name
        try:
            fd = sockdirs.lock(self.dir, self.base)
        except (sockdirs.NotOurs, OSError) as error:
            raise LaunchError(f"The kernel on {where} lost its socket directory: {error}") from None
        try:
            wrong = sockdirs.sockets_of(fd, NAMES, self.uid)
        finally:
            os.close(fd)
        if wrong:
            raise LaunchError(
                f"The kernel on {where} said it was ready, but {', '.join(wrong)} in its "
                "socket directory are not its sockets."
            )
        run = os.path.basename(self.dir)
        for name in NAMES:
            os.symlink(os.path.join(run, name), os.path.join(self.base, name))

    def _unlink(self) -> None:
        """Our links go (a restart: nothing connects until the new kernel is checked)."""
        if self.base is not None:
            for name in NAMES:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.base, name))

    async def _remove_container(self) -> None:
        if self.boxed is not None:
            await images.remove(self.boxed, self.ids)
            self.boxed = None

    def _write(self, data: str) -> None:
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.write(data.encode())

    async def _read(self, stream: asyncio.StreamReader, output: Output) -> None:
        while line := await stream.readline():
            output.line(line.decode(errors="replace").rstrip("\n"))
        output.ended()

    def exit_status(self) -> int | None:
        return 0 if self.process is None else self.process.returncode

    async def signal(self, signum: int) -> None:
        """To the group of the process we started, while it is ours to signal: unreaped
        (its pid, so its group, cannot have been reused) and still the user's."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        if not owned_by(process.pid, self.uid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)

    async def end(self) -> None:
        self._stop_ping()
        if self.process is not None and self.process.returncode is not None:
            self.process = None
        if self._reader is not None:
            self._reader.cancel()

    async def close(self) -> None:
        await self.signal(signal.SIGKILL)  # a launch that failed half-way: our child goes
        await self._remove_container()
        await self.end()
        self._unlink()
        if self.base is not None:
            sockdirs.remove(self.base, self.parent)
            self.base = self.dir = None
