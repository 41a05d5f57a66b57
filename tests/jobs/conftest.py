"""Fixtures for the job template tests: hosts with GPU slots."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from jupyter_gpuhive.jobs import GpuSlot

HostGpus = tuple[str, str, list[GpuSlot]]


def host(name: str, address: str, count: int, *, mig: bool = False) -> HostGpus:
    """A host entry for `render` with `count` GPUs whose UUIDs name host and index."""
    prefix = "MIG" if mig else "GPU"
    slots = [
        GpuSlot(name, address, i, f"{prefix}-{name}-{i:04d}-aaaa-bbbb-cccc") for i in range(count)
    ]
    return (name, address, slots)


@pytest.fixture
def hosts() -> Callable[..., list[HostGpus]]:
    """Factory: hosts(2, 2) gives gpu0 with 2 GPUs and gpu1 with 2 GPUs on 10.0.0.x."""

    def make(
        *counts: int, addresses: Sequence[str] | None = None, mig: bool = False
    ) -> list[HostGpus]:
        return [
            host(f"gpu{i}", addresses[i] if addresses else f"10.0.0.{i + 1}", count, mig=mig)
            for i, count in enumerate(counts)
        ]

    return make
