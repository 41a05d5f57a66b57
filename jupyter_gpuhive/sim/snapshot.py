"""The state of a simulated host at one instant: GPU load derived from its processes.

Standard library only. The arithmetic lives in ``core`` (shared with the stand-in's fast path).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .core import BASE_USED_MIB as BASE_USED_MIB
from .core import DEGREES_PER_UTIL as DEGREES_PER_UTIL
from .core import WATTS_PER_UTIL as WATTS_PER_UTIL
from .core import free_mib, gpu_load
from .inventory import SimGpu, SimHostConfig
from .processes import Placement, SimProcess


@dataclass(frozen=True)
class GpuProcessRow:
    """One process on one GPU (a process on two GPUs gives two rows, as in nvidia-smi)."""

    process: SimProcess
    placement: Placement

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid


@dataclass(frozen=True)
class GpuState:
    """One GPU's derived readings; utilization is None with MIG on."""

    gpu: SimGpu
    util_gpu: int | None
    util_mem: int | None
    mem_used_mib: int
    mig_used_mib: tuple[int, ...]
    temperature_c: int
    power_w: float | None
    rows: tuple[GpuProcessRow, ...] = field(default=())

    @property
    def mem_free_mib(self) -> int:
        """Memory neither used nor reserved."""
        return free_mib(self.gpu, self.mem_used_mib)


@dataclass(frozen=True)
class HostSnapshot:
    """A simulated host's GPUs at one instant."""

    config: SimHostConfig
    gpus: tuple[GpuState, ...]
    timestamp: float

    def rows(self) -> list[tuple[GpuState, GpuProcessRow]]:
        """Every (GPU, process row) pair, by GPU index then pid."""
        return [(state, row) for state in self.gpus for row in state.rows]


def gpu_state(gpu: SimGpu, rows: list[GpuProcessRow]) -> GpuState:
    """Derive one GPU's utilization, memory, temperature and power from its process rows."""
    loads = [(r.process.util_pct, r.process.used_memory_mib, r.placement.mig_index) for r in rows]
    util_gpu, util_mem, used, slices, temperature, power = gpu_load(gpu, loads)
    return GpuState(gpu, util_gpu, util_mem, used, slices, temperature, power, tuple(rows))


def snapshot(
    config: SimHostConfig, processes: list[SimProcess], timestamp: float | None = None
) -> HostSnapshot:
    """The host's state given the processes on its GPUs."""
    states = []
    for gpu in sorted(config.gpus, key=lambda g: g.index):
        rows = [
            GpuProcessRow(proc, place)
            for proc in sorted(processes, key=lambda p: p.pid)
            for place in proc.placements
            if place.gpu_index == gpu.index
        ]
        states.append(gpu_state(gpu, rows))
    return HostSnapshot(config, tuple(states), time.time() if timestamp is None else timestamp)
