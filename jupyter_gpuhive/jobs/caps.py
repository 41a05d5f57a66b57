"""Memory caps of a share of a GPU: the environment that keeps a job or a kernel to its share.

A program on a share of one GPU gets the framework-level caps that exist (isolation where it
can be had; protection's over-share violation where it cannot):

- JAX: `XLA_PYTHON_CLIENT_MEM_FRACTION`, read by JAX itself;
- PyTorch: `per_process_memory_fraction` in the vendor's allocator settings (PyTorch reads it
  at CUDA start, from 2.9), and `torch.cuda.set_per_process_memory_fraction` from gpuhive's
  start-up (capstart.py) for older versions;
- TensorFlow: memory growth on (`TF_FORCE_GPU_ALLOW_GROWTH`, so it never maps the whole GPU
  at start), and a logical device limited to the share's memory from the start-up;
- where the host runs CUDA MPS (its entry says `mps: true`), the MPS client limit of the
  vendor's pinning (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, `<uuid>=<MiB>M`), which holds for
  every program, whatever its framework.

The start-up travels like the checkpoint helper (resume.py): packed into the environment,
unpacked on the host into a private folder put first on PYTHONPATH as `sitecustomize.py`.
Compute is time-sliced, never isolated: nothing here limits it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import replace
from functools import cache

from ..errors import Invalid
from ..model import Reservation
from ..model.caps import FRACTION_ENV, JAX_ENV, MIB_ENV, TF_GROWTH_ENV, Cap
from ..model.caps import cap_env as share_env
from ..model.gpus import Pinning
from ..model.shares import parse_memory
from . import capstart
from .resume import pack
from .tasks import TaskSpec, TemplateError
from .template import Option

SOURCE_ENV = "GPUHIVE_CAPS_SOURCE"
ENV_NAMES = (FRACTION_ENV, MIB_ENV, SOURCE_ENV, JAX_ENV, TF_GROWTH_ENV)

OPTIONS = {
    "memory": Option(
        "a share of one shareable GPU: its memory (20G, 512M; MiB if bare). The job is a share "
        "job: it runs on one GPU, packed with other shares, capped to this memory",
        None,
        str,
    ),
}


def cap_env(cap: Cap, pinning: Pinning, *, mps: bool = False,
            base: Mapping[str, str] | None = None) -> dict[str, str]:  # fmt: skip
    """The caps' variables (model/caps.py) with gpuhive's start-up packed for the host to
    unpack; {} for a whole GPU."""
    env = share_env(cap, pinning, mps=mps, base=base)
    if env:
        env[SOURCE_ENV] = packed_start()
    return env


def cap_names(pinning: Pinning) -> frozenset[str]:
    """Every variable `cap_env` may set with this pinning (a job's env may not set them)."""
    return frozenset(n for n in (*ENV_NAMES, pinning.mps_limit) if n)


@cache
def packed_start() -> str:
    """capstart.py, docstrings dropped, gzip-compressed and base64-encoded (one line)."""
    return pack(capstart.__file__)


def unpack_command() -> str:
    """Shell words that unpack the start-up into a private folder first on PYTHONPATH (before
    `exec CMD`); a host without room for it runs the command uncapped by the start-up."""
    return (
        'if gpuhive_caps="$(mktemp -d "${TMPDIR:-/tmp}/gpuhive-caps-XXXXXX")" && '
        f'printf %s "${SOURCE_ENV}" | base64 -d | gzip -dc > "$gpuhive_caps/sitecustomize.py"; '
        'then export PYTHONPATH="$gpuhive_caps${PYTHONPATH:+:$PYTHONPATH}"; fi; '
        f"unset {SOURCE_ENV} gpuhive_caps; "
    )


def capped(task: TaskSpec, caps: Mapping[str, Cap], *, mps: bool = False,
           pinning: Pinning) -> TaskSpec:  # fmt: skip
    """The task with its share's caps when it runs on exactly one GPU that `caps` names."""
    if len(task.gpus) != 1 or task.gpus[0].uuid not in caps:
        return task
    env = cap_env(caps[task.gpus[0].uuid], pinning, mps=mps, base=task.env)
    if not env:
        return task
    command = f"{unpack_command()}exec bash -c {shlex.quote(task.command)}"
    return replace(task, command=command, env={**task.env, **env})


def job_caps(memory: str | None, gpus: list[tuple[str, int | None]]) -> dict[str, Cap]:
    """A share job's cap by GPU UUID from its `memory` option and its GPUs ((uuid, MiB or
    None)); {} for a whole-GPU job. A share is of one GPU: more is a TemplateError."""
    if memory is None:
        return {}
    if len(gpus) != 1:
        raise TemplateError(
            f"option memory asks for a share of one GPU, but the job has {len(gpus)} GPUs; "
            "leave memory out to use whole GPUs"
        )
    try:
        mib = parse_memory(memory, "memory")
    except Invalid as error:
        raise TemplateError(str(error)) from None
    uuid, total = gpus[0]
    if total is not None and mib > total:
        raise TemplateError(f"option memory {memory} is more than the GPU's {total} MiB")
    return {uuid: Cap.of(uuid, total, mib=mib)}


def reservation_env(res: Reservation, pinning: Pinning, *, mps: bool = False) -> dict[str, str]:
    """The caps of a program on a share booking's GPU (a kernel on it; with the start-up
    packed for the kernel's own start to unpack); {} for whole GPUs."""
    if not res.is_share or len(res.gpus) != 1:
        return {}
    gpu = res.gpus[0]
    return cap_env(Cap.of(gpu.uuid, gpu.memory_mib, fraction=res.share), pinning, mps=mps)
