"""Simulated GPU clusters: a local host for the demo, and real sshd hosts on loopback for tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .inventory import (
    CONFIG_ENV,
    HOST_ENV,
    SimHostConfig,
    clear_faults,
    load_config,
    preset,
    set_faults,
    write_config,
)
from .nvidia_smi import install_nvidia_smi
from .sshd import SYSTEM_PATH, SshdCluster
from .sshhost import SimHost, check_host_name
from .users import ensure_user, start_gpu_process

__all__ = ["LocalSimHost", "SimHost", "SshdCluster", "ensure_user", "start_gpu_process"]


class LocalSimHost:
    """A simulated host for the ``local`` transport: a config file and a bin dir on PATH."""

    def __init__(
        self,
        name: str,
        workdir: str | os.PathLike[str],
        config: SimHostConfig | None = None,
        *,
        profile: str = "a100x4",
    ) -> None:
        self.name = check_host_name(name)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bin_dir = self.workdir / "bin"
        install_nvidia_smi(self.bin_dir)
        self.config_path = self.workdir / f"{name}.json"
        write_config(self.config_path, config or preset(profile, name))

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment in which ``nvidia-smi`` is this host's stand-in."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH') or SYSTEM_PATH}"
        env[HOST_ENV] = self.name
        env[CONFIG_ENV] = str(self.config_path)
        return env

    @property
    def config(self) -> SimHostConfig:
        """The host's current simulated inventory."""
        return load_config(self.config_path)

    def write_config(self, config: SimHostConfig) -> None:
        """Replace the host's inventory (the stand-in reads it on its next call)."""
        write_config(self.config_path, config)

    def set_fault(self, **knobs: Any) -> SimHostConfig:
        """Set fault knobs: delay_s, hang, junk, driver_failure (None keeps)."""
        return set_faults(self.config_path, **knobs)

    def clear_faults(self) -> SimHostConfig:
        """Reset every fault knob."""
        return clear_faults(self.config_path)

    def start_process(
        self, gpus: Sequence[int | str], *, user: str | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Start a real process on `gpus` of this host only (see users.start_gpu_process),
        pinned with the variable of the host's vendor (ROCR_VISIBLE_DEVICES on an AMD host)."""
        amd = self.config.vendor == "amd"
        kwargs.setdefault("variable", "ROCR_VISIBLE_DEVICES" if amd else "CUDA_VISIBLE_DEVICES")
        return start_gpu_process(self.name, gpus, user=user, config=self.config_path, **kwargs)
