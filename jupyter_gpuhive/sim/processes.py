"""Find the real processes that sit on simulated GPUs, by reading /proc.

A process is on a simulated host's GPUs when its environment (``/proc/PID/environ``, i.e. the
environment it was started with) carries ``GPUHIVE_SIM_HOST=<host>`` and a non-empty
``CUDA_VISIBLE_DEVICES``. Entries are read as CUDA does: indices, ``GPU-…`` UUIDs (unique prefixes
allowed) or ``MIG-…`` UUIDs, comma separated; reading stops at the first entry that names no
device. ``CUDA_DEVICE_ORDER`` is ignored: index N is the host's GPU N (on a MIG-enabled GPU, its
first slice). Shells and process wrappers (bash, screen, env, …) never count: they would not open
a CUDA context.

Limit: ``/proc/PID/environ`` is readable only by the process owner and root. Run as another user,
the stand-in skips processes whose environment it cannot read, as an unprivileged monitoring
account would then miss them; monitor as root (or as the owner) to see every process.

Standard library only. The reading itself lives in ``core`` (the stand-in's fast path uses it
without these dataclasses).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import core
from .core import WRAPPERS as WRAPPERS
from .inventory import SimGpu, SimHostConfig


@dataclass(frozen=True)
class Placement:
    """Where a process sits: a physical GPU and, with MIG, one of its slices."""

    gpu_index: int
    mig_index: int | None = None


@dataclass(frozen=True)
class SimProcess:
    """A real process seen as a GPU process: its pid, name, placements and load per GPU."""

    pid: int
    name: str
    placements: tuple[Placement, ...]
    used_memory_mib: int
    util_pct: int


def parse_visible_devices(value: str, gpus: list[SimGpu]) -> tuple[Placement, ...]:
    """Map a CUDA_VISIBLE_DEVICES value to placements on `gpus`, the way CUDA reads it."""
    return tuple(Placement(g, m) for g, m in core.visible_devices(value, gpus))


def scan(config: SimHostConfig, proc: str | os.PathLike[str] = Path("/proc")) -> list[SimProcess]:
    """All readable processes on `config`'s simulated GPUs, sorted by pid."""
    return [
        SimProcess(pid, name, tuple(Placement(g, m) for g, m in places), mem, util)
        for pid, name, places, mem, util in core.find_processes(
            config.host, config.gpus, os.fspath(proc)
        )
    ]
