"""A share's memory caps as values: the fraction and MiB of one GPU, and the variables that
make the frameworks (and, where a host runs it, the vendor's multi-process service) keep a
process to them. Jobs and kernels add gpuhive's start-up (jobs/caps.py); a notebook's own
kernel on a share booking sets them for itself (%gpureserve)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import Invalid
from .gpus import Pinning

FRACTION_ENV = "GPUHIVE_SHARE"  # the share as a fraction of the GPU's memory
MIB_ENV = "GPUHIVE_SHARE_MIB"  # the share's MiB
JAX_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
TF_GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
ALLOC_OPTION = "per_process_memory_fraction"


@dataclass(frozen=True)
class Cap:
    """A share of one GPU: the fraction of its memory and its MiB (None where unknown)."""

    uuid: str
    fraction: float | None = None
    mib: int | None = None

    @classmethod
    def of(cls, uuid: str, total_mib: int | None, *, fraction: float | None = None,
           mib: int | None = None) -> Cap:  # fmt: skip
        """The cap from either the fraction or the MiB, the other worked out from the GPU's
        memory when it is known."""
        if fraction is None and mib is not None and total_mib:
            fraction = min(1.0, mib / total_mib)
        if mib is None and fraction is not None and total_mib:
            mib = int(fraction * total_mib)
        if fraction is not None and not 0 < fraction <= 1:
            raise Invalid(f"a share is a fraction of one GPU above 0 and at most 1, not {fraction}")
        return cls(uuid, round(fraction, 4) if fraction is not None else None, mib)

    @property
    def whole(self) -> bool:
        """A share of one: nothing to cap."""
        return self.fraction is not None and self.fraction >= 1


def cap_env(cap: Cap, pinning: Pinning, *, mps: bool = False,
            base: Mapping[str, str] | None = None) -> dict[str, str]:  # fmt: skip
    """The variables that cap a process on `cap`'s GPU (`base`: the env they join, whose
    allocator settings are kept); {} for a whole GPU."""
    if cap.whole or (cap.fraction is None and cap.mib is None):
        return {}
    env = {TF_GROWTH_ENV: "true"}
    if cap.fraction is not None:
        share = f"{cap.fraction:g}"
        env[FRACTION_ENV] = env[JAX_ENV] = share
        if pinning.alloc_conf:
            given = (base or {}).get(pinning.alloc_conf, "")
            kept = [o for o in given.split(",") if o and not o.startswith(ALLOC_OPTION + ":")]
            env[pinning.alloc_conf] = ",".join([*kept, f"{ALLOC_OPTION}:{share}"])
    if cap.mib is not None:
        env[MIB_ENV] = str(cap.mib)
        if mps and pinning.mps_limit:
            env[pinning.mps_limit] = f"{cap.uuid}={cap.mib}M"
    return env
