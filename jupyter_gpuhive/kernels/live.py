"""What the lifecycle needs of the registry of live kernels (kernels.registry)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class LiveKernel(Protocol):
    """A live kernel on a reservation, as the lifecycle reads it."""

    @property
    def kernel_id(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def reservation_id(self) -> int: ...


class KernelControl(Protocol):
    """The live kernels, and what can be done to one."""

    def live(self) -> Sequence[LiveKernel]: ...
    async def interrupt(self, kernel_id: str) -> None: ...
    async def shutdown(self, kernel_id: str) -> None: ...
