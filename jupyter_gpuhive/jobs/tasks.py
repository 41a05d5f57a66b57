"""Value types of the job layer: GPU slots, fully resolved tasks, and the template error."""

from __future__ import annotations

from dataclasses import dataclass


class TemplateError(ValueError):
    """A job template, its variables, options or sweep specification is invalid."""


@dataclass(frozen=True)
class GpuSlot:
    """One GPU (or MIG device) a job holds: its host, the host's address, index and UUID."""

    host: str
    address: str
    index: int
    uuid: str


@dataclass(frozen=True)
class TaskSpec:
    """One fully resolved task: the shell command and environment to run on one host.

    `command` is shell text (the user's own code, run as the user); every value substituted
    into it is already shell-quoted. `env` holds verbatim values that a launcher must quote.
    `CUDA_VISIBLE_DEVICES` in `env` always lists the UUIDs of `gpus`, in order.
    """

    host: str
    address: str
    gpus: tuple[GpuSlot, ...]
    command: str
    env: dict[str, str]
    variables: dict[str, str]
    job: str = ""
    index: int = 0
    role: str = "task"
    workdir: str | None = None

    @property
    def visible_devices(self) -> str:
        """The `CUDA_VISIBLE_DEVICES` value for this task's GPUs (UUIDs, comma separated)."""
        return ",".join(gpu.uuid for gpu in self.gpus)
