"""What a host's GPUs report, whatever their vendor: GPUs, slices, processes, health, pinning.

A vendor's tool (hosts/vendors/) is read into these values; everything else in gpuhive
(monitoring, protection, accounting, the doctor, jobs, kernels, containers) reads only them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

OK, DEGRADED, FAILED = "ok", "degraded", "failed"
RANK = {OK: 0, DEGRADED: 1, FAILED: 2}


class GpuReadError(ValueError):
    """A vendor tool's output could not be read; `reason` says why and where."""

    def __init__(self, reason: str, line: int | None = None, text: str | None = None) -> None:
        where = f" (line {line}: {text!r})" if line is not None else ""
        super().__init__(f"{reason}{where}")
        self.reason = reason
        self.line = line
        self.text = text


class GpuToolError(GpuReadError):
    """The vendor's tool ran but said it cannot reach the driver or any GPU."""


@dataclass(frozen=True)
class MigDevice:
    """One slice (partition) of a GPU: its index, instance ids, memory, UUID and profile."""

    index: int
    gpu_instance_id: int | None
    compute_instance_id: int | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    multiprocessor_count: int | None = None
    uuid: str | None = None
    profile: str | None = None


GpuSlice = MigDevice  # the vendor-neutral name of a partition


@dataclass(frozen=True)
class GpuMetrics:
    """One physical GPU's readings; None wherever the tool had no value."""

    index: int
    uuid: str
    name: str | None
    util_gpu: int | None
    util_mem: int | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    temperature_c: int | None
    power_w: float | None
    fan_pct: int | None
    power_limit_w: float | None = None
    pci_bus_id: str | None = None
    persistence_mode: bool | None = None
    mig_enabled: bool | None = None
    mig: tuple[MigDevice, ...] = ()
    # (field, why) of each reading the tool did not report: a placeholder's meaning ('needs
    # root to read') or that the host's driver does not know the field
    unreported: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Health:
    """A GPU's health state and the reasons for it (empty when ok)."""

    state: str = OK
    reasons: tuple[str, ...] = ()


def worst(*found: Health) -> Health:
    """The worst state of several findings, with every reason."""
    state = max((h.state for h in found), key=RANK.__getitem__, default=OK)
    return Health(state, tuple(r for h in found for r in h.reasons))


@dataclass(frozen=True)
class ProcessReading:
    """A compute process as the tool saw it: PID, GPU, memory and slice (owners: from `ps`)."""

    pid: int
    gpu_uuid: str | None  # the physical GPU's
    used_memory_mib: int | None
    slice_uuid: str | None = None


@dataclass(frozen=True)
class VendorReading:
    """Everything one probe's vendor sections said about a host's GPUs."""

    gpus: tuple[GpuMetrics, ...] = ()
    processes: tuple[ProcessReading, ...] = ()
    slice_uuids: dict[str, tuple[str, ...]] = field(default_factory=dict)  # GPU -> slices
    slices: dict[str, tuple[MigDevice, ...]] = field(default_factory=dict)  # with details
    health: dict[str, Health] = field(default_factory=dict)  # GPU UUID -> health
    lost: tuple[tuple[str, str], ...] = ()  # (PCI bus id, message) of GPUs the tool lost
    error: str | None = None  # why the GPUs could not be read


class ShellWord(str):
    """A container flag's word that a vendor built as shell (a lookup on the host, from values
    no user writes): the engine's command line takes it as it is, never quoted."""


@dataclass(frozen=True)
class Pinning:
    """How a process or container is given exactly some devices (and sees no others)."""

    visible: str  # the environment variable listing the device UUIDs, comma separated
    fixed: Mapping[str, str] = field(default_factory=dict)  # set alongside it
    cdi_kind: str | None = None  # CDI device kind: `--device KIND=UUID`
    gpus_flag: bool = False  # the engine's `--gpus "device=..."` (a vendor's toolkit)
    # set alongside it to the positions 0..n-1 of the n pinned devices (ROCm's
    # HIP_VISIBLE_DEVICES, which picks among what ROCR_VISIBLE_DEVICES left)
    counted: tuple[str, ...] = ()
    # a share's memory caps (jobs/caps.py): the framework allocator's settings variable that
    # takes `per_process_memory_fraction`, and the variable of a per-client memory limit
    # where the host runs the vendor's multi-process service (`<uuid>=<MiB>M`), if any
    alloc_conf: str | None = None
    mps_limit: str | None = None

    @property
    def names(self) -> frozenset[str]:
        """Every environment variable this pinning sets."""
        return frozenset((self.visible, *self.counted, *self.fixed))

    def env(self, uuids: Iterable[str]) -> dict[str, str]:
        """The environment that pins these devices."""
        listed = list(uuids)
        positions = ",".join(str(i) for i in range(len(listed)))
        return {
            **self.fixed,
            **dict.fromkeys(self.counted, positions),
            self.visible: ",".join(listed),
        }

    def uuids(self, env: Mapping[str, str]) -> list[str]:
        """The devices an environment pins."""
        return [u for u in env.get(self.visible, "").split(",") if u]

    def container_flags(self, mode: str, uuids: list[str]) -> list[str]:
        """The engine flags for these devices: mode 'toolkit' (`--gpus`), 'cdi' or 'none'."""
        if mode == "none" or not uuids:
            return []
        if mode == "toolkit" and self.gpus_flag:
            # --gpus parses CSV: the device list needs its own quotes inside the value.
            return ["--gpus", '"device=' + ",".join(uuids) + '"']
        kind = self.cdi_kind or "gpu"
        return [word for uuid in uuids for word in ("--device", f"{kind}={uuid}")]
