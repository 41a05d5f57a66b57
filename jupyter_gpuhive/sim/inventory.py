"""The simulated GPU inventory of one host: its JSON config file, presets and fault knobs.

Standard library only: the ``nvidia-smi`` stand-in imports this when its fast path (``fastpath``)
cannot answer; the fast path mirrors these dataclasses' fields and defaults.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .core import CONFIG_ENV as CONFIG_ENV
from .core import HOST_ENV as HOST_ENV
from .core import MEM_ENV as MEM_ENV
from .core import NA, NOT_SUPPORTED, fill_gpu_defaults
from .core import UTIL_ENV as UTIL_ENV

FAULTS = ("delay_s", "hang", "junk", "driver_failure")


class SimConfigError(ValueError):
    """The simulated host's config file is missing or malformed."""


@dataclass
class SimMig:
    """One MIG slice of a physical GPU."""

    profile: str
    uuid: str
    memory_total_mib: int
    gpu_instance_id: int
    compute_instance_id: int = 0
    multiprocessor_count: int = 14


@dataclass
class SimGpu:
    """One simulated physical GPU; `unavailable` maps query fields to N/A or Not Supported."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    pci_bus_id: str = ""
    memory_reserved_mib: int | None = None
    temperature_c: int = 30
    idle_power_w: float = 55.0
    power_limit_w: float | None = 400.0
    fan_pct: int | None = None
    clocks_sm_mhz: int | None = 1410
    persistence_mode: bool = True
    mig_capable: bool | None = None
    mig: list[SimMig] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    ghost: dict[str, int] | None = None
    fault: str | None = None  # a failure preset of sim/health.py (ecc, lost, thermal, ...)

    def __post_init__(self) -> None:
        """Fill the derived defaults (PCI bus id, reserved memory, MIG capability)."""
        fill_gpu_defaults(self)

    @property
    def mig_enabled(self) -> bool:
        """Whether MIG mode is on (the GPU has slices)."""
        return bool(self.mig)


@dataclass
class SimHostConfig:
    """A simulated host: its name, GPUs, driver and the fault knobs the stand-in obeys."""

    host: str
    gpus: list[SimGpu] = field(default_factory=list)
    driver_version: str = "535.129.03"
    cuda_version: str = "12.2"
    delay_s: float = 0.0
    hang: bool = False
    junk: bool | str = False
    # the driver's trouble (sim/generations.py FAILURES): "not_loaded" (True too),
    # "nvml_mismatch" or "no_devices"
    driver_failure: bool | str = False
    topology: str | dict[str, Any] | None = None  # nvidia-smi topo -m: see sim/topology.py
    # every GPU's ECC, retired pages, remapped rows and slowdown reasons in `-q -x`, as a real
    # driver prints them (the samples hold none: off, a healthy GPU prints as they do)
    health_elements: bool = False
    # process names in `-q -x` as they are, not XML-escaped: the threat model assumes a driver
    # may print them so (tests play a user whose names try to forge XML)
    raw_names: bool = False
    vendor: str = "nvidia"  # the host entry's `vendor` (amd: read through the amd-smi stand-in)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form of this config."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimHostConfig:
        """Build a config from its JSON form; unknown keys are an error."""
        try:
            gpus = []
            for raw in data.get("gpus", []):
                gpu = dict(raw)
                gpu["mig"] = [SimMig(**_known(SimMig, m)) for m in gpu.get("mig", [])]
                gpus.append(SimGpu(**_known(SimGpu, gpu)))
            top = _known(cls, {k: v for k, v in data.items() if k != "gpus"})
            return cls(gpus=gpus, **top)
        except (TypeError, AttributeError) as exc:
            raise SimConfigError(f"bad simulated host config: {exc}") from None


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` after checking that every key is a field of dataclass `cls`."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise SimConfigError(f"unknown keys for {cls.__name__}: {', '.join(unknown)}")
    return data


def load_config(path: str | os.PathLike[str]) -> SimHostConfig:
    """Read a simulated host config from a JSON file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SimConfigError(f"cannot read simulated host config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise SimConfigError(f"simulated host config {path} is not a JSON object")
    return SimHostConfig.from_dict(data)


def write_config(path: str | os.PathLike[str], config: SimHostConfig) -> Path:
    """Write a config atomically (readers never see half a file), world-readable."""
    import tempfile  # here, not at the top: the stand-in only reads configs

    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".simcfg-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(config.to_dict(), out, indent=1)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def set_faults(path: str | os.PathLike[str], **knobs: Any) -> SimHostConfig:
    """Change fault knobs (delay_s, hang, junk, driver_failure) in a config file; None keeps."""
    unknown = sorted(set(knobs) - set(FAULTS))
    if unknown:
        raise SimConfigError(f"unknown fault knobs: {', '.join(unknown)}")
    config = load_config(path)
    for name, value in knobs.items():
        if value is not None:
            setattr(config, name, value)
    write_config(path, config)
    return config


def clear_faults(path: str | os.PathLike[str]) -> SimHostConfig:
    """Reset every fault knob of a config file."""
    return set_faults(path, delay_s=0.0, hang=False, junk=False, driver_failure=False)


def set_gpu_fault(path: str | os.PathLike[str], index: int, fault: str | None) -> SimHostConfig:
    """Give GPU `index` a failure preset of sim/health.py (None: healthy again)."""
    from .health import GPU_FAULTS

    if fault is not None and fault not in GPU_FAULTS:
        raise SimConfigError(f"unknown GPU fault {fault!r}; choose one of {', '.join(GPU_FAULTS)}")
    config = load_config(path)
    gpu = next((g for g in config.gpus if g.index == index), None)
    if gpu is None:
        raise SimConfigError(f"the simulated host has no GPU {index}")
    gpu.fault = fault
    write_config(path, config)
    return config


# --- presets matching the sample outputs -------------------------------------------------

SAMPLE_UUIDS = (
    "GPU-c1e2da59-5c26-e34c-59a7-373b4ab9404c",
    "GPU-27e84382-7ebd-62ef-e781-f6c61b832e12",
    "GPU-08780839-4892-e3cf-1b3f-0ab8c884991d",
    "GPU-86b9203f-fe3d-ada2-a317-f5b60384b95d",
)
SAMPLE_MIG_UUIDS = (
    "MIG-f9a16904-b58e-d520-c431-96244c7fdfaf",
    "MIG-5ebf3fb5-5ae3-1fb3-d239-40e3e35ae671",
    "MIG-dbbf4f9e-de61-bf85-9e9e-8d6d5f61c39a",
)
PROFILES = ("a100x4", "mig", "gtx", "mixed", "mi300x")


def make_uuid(host: str, kind: str, index: int) -> str:
    """A stable, host-unique UUID in nvidia-smi's form ('GPU-…' or 'MIG-…')."""
    import uuid as uuidlib  # here, not at the top: the stand-in never needs it

    return f"{kind}-{uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f'{index}.{kind}.{host}.gpuhive')}"


def preset(profile: str, host: str, *, sample_uuids: bool = False) -> SimHostConfig:
    """A host config for one of the sample profiles: a100x4, mig, gtx, mixed or mi300x (AMD).

    With `sample_uuids` the GPUs carry the samples' UUIDs (for format tests); otherwise UUIDs
    are derived from the host name, so they are unique across a simulated cluster.
    """

    def gpu_uuid(i: int) -> str:
        return SAMPLE_UUIDS[i] if sample_uuids else make_uuid(host, "GPU", i)

    def mig_uuid(i: int) -> str:
        return SAMPLE_MIG_UUIDS[i] if sample_uuids else make_uuid(host, "MIG", i)

    if profile == "mi300x":  # an AMD host: amd-smi, ROCR_VISIBLE_DEVICES, XGMI between all
        # ROCm's UUIDs: `GPU-` and the ASIC serial's 16 hex digits (what amd-smi's stand-in
        # prints as the serial, and ROCR_VISIBLE_DEVICES takes)
        serials = ["GPU-" + gpu_uuid(i)[4:].replace("-", "")[:16] for i in range(8)]
        gpus = [SimGpu(i, serials[i], "AMD Instinct MI300X", 196592, idle_power_w=140.0,
                       power_limit_w=750.0) for i in range(8)]  # fmt: skip
        return SimHostConfig(host, gpus, "6.7.0", "", vendor="amd")
    if profile == "a100x4":
        gpus = [SimGpu(i, gpu_uuid(i), "NVIDIA A100-SXM4-40GB", 40960) for i in range(4)]
        return SimHostConfig(host, gpus, "535.129.03", "12.2")
    if profile == "mig":
        slices = [
            SimMig("3g.40gb", mig_uuid(0), 40192, 1, 0, 42),
            SimMig("2g.20gb", mig_uuid(1), 19968, 5, 0, 28),
            SimMig("1g.10gb", mig_uuid(2), 9728, 13, 0, 14),
        ]
        gpus = [
            SimGpu(0, gpu_uuid(0), "NVIDIA A100-SXM4-80GB", 81920, mig=slices),
            SimGpu(1, gpu_uuid(1), "NVIDIA A100-SXM4-80GB", 81920),
        ]
        return SimHostConfig(host, gpus, "550.90.07", "12.4")
    if profile == "gtx":
        gtx = SimGpu(
            0,
            gpu_uuid(0),
            "NVIDIA GeForce GTX 1050",
            4096,
            fan_pct=30,
            power_limit_w=None,
            unavailable={"power.draw": NA},
        )
        return SimHostConfig(host, [gtx], "515.65.01", "11.7")
    if profile == "mixed":
        old = SimGpu(
            0,
            gpu_uuid(0),
            "NVIDIA GeForce GTX 660",
            2048,
            fan_pct=30,
            power_limit_w=None,
            unavailable={
                "utilization.gpu": NOT_SUPPORTED,
                "utilization.memory": NOT_SUPPORTED,
                "power.draw": NOT_SUPPORTED,
            },
        )
        v100 = SimGpu(1, gpu_uuid(1), "NVIDIA Tesla V100-PCIE-16GB", 16160)
        return SimHostConfig(host, [old, v100], "470.82.01", "11.4")
    raise SimConfigError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
