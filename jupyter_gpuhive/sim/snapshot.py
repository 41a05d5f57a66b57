"""The state of a simulated host at one instant: GPU load derived from its processes.

Standard library only: the ``nvidia-smi`` stand-in imports this on every call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .inventory import SimGpu, SimHostConfig
from .processes import Placement, SimProcess

BASE_USED_MIB = 4  # what an idle GPU without MIG reports as used
WATTS_PER_UTIL = 2.5
DEGREES_PER_UTIL = 0.33


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
        return self.gpu.memory_total_mib - (self.gpu.memory_reserved_mib or 0) - self.mem_used_mib


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
    ghost = gpu.ghost or {}
    util = min(100, sum(r.process.util_pct for r in rows) + int(ghost.get("util", 0)))
    capacity = gpu.memory_total_mib - (gpu.memory_reserved_mib or 0)
    if gpu.mig_enabled:
        slices = tuple(
            min(
                mig.memory_total_mib,
                sum(r.process.used_memory_mib for r in rows if r.placement.mig_index == i),
            )
            for i, mig in enumerate(gpu.mig)
        )
        used = min(capacity, sum(slices))
        util_gpu: int | None = None
        util_mem: int | None = None
    else:
        slices = ()
        used = BASE_USED_MIB + sum(r.process.used_memory_mib for r in rows)
        used = min(capacity, used + int(ghost.get("memory_mib", 0)))
        util_gpu, util_mem = util, util // 2
    power: float | None = gpu.idle_power_w + WATTS_PER_UTIL * util
    if gpu.power_limit_w is not None and power is not None:
        power = min(power, gpu.power_limit_w)
    temperature = gpu.temperature_c + round(DEGREES_PER_UTIL * util)
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
