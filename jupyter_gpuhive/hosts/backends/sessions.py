"""A kernel's `Session` over a child process of this server: its stdin, its merged output
lines, its exit status; closing ends its input, and its process group if it still runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ..loops import end_group


class ProcessSession:
    """The `Session` of a child process started with stdin and stdout pipes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._ending: asyncio.Future[None] | None = None

    def write(self, data: str) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.write(data.encode())

    async def lines(self) -> AsyncIterator[str]:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            yield line.decode(errors="replace").rstrip("\n")

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def close(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        if self.process.returncode is None:
            self._ending = asyncio.ensure_future(end_group(self.process))
