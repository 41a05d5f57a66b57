"""What share of a GPU a booking asks for, checked against the GPU: a share is of one whole
GPU that its site made shareable, and never more memory than the GPU has."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import Conflict, Invalid
from ..model import Gpu
from ..model.shares import WHOLE, describe_memory, share_of_memory


def requested_share(gpus: Sequence[Gpu], share: int | None, memory_mib: int | None) -> int:
    """The millionths of its GPU a booking of `gpus` holds: WHOLE when it asks for no share
    (or for all of it), else a share of its one shareable GPU. Invalid (422) for a request
    that cannot be a share, Conflict (409) for a GPU its site does not share."""
    if share is not None and memory_mib is not None:
        raise Invalid("Give either 'share' (a fraction of the GPU) or 'memory', not both.")
    if share is None and memory_mib is None:
        return WHOLE
    if len(gpus) != 1:
        raise Invalid(
            f"A share is of one GPU; this booking names {len(gpus)}. Book one GPU with a "
            "share, or whole GPUs without one."
        )
    gpu = gpus[0]
    if memory_mib is not None:
        share = _share_of_memory(gpu, memory_mib)
    assert share is not None
    if share >= WHOLE:
        return WHOLE  # all of it: a whole-GPU booking
    check_shareable(gpu)
    return share


def check_shareable(gpu: Gpu) -> None:
    """Refuse a share of `gpu` when it is a MIG slice (422) or not shareable (409)."""
    if gpu.is_slice:
        raise Invalid(
            f"{gpu.ref} is a MIG slice: a share is of a whole GPU. Book the slice whole, or a "
            f"share of a shareable GPU."
        )
    if not gpu.shareable:
        raise Conflict(
            f"{gpu.ref} is not shareable: its site books it whole only. %gpustatus and the "
            "sidebar show which GPUs are shareable.",
            gpus=[gpu.ref],
        )


def _share_of_memory(gpu: Gpu, memory_mib: int) -> int:
    if gpu.memory_mib is None:
        raise Invalid(
            f"The memory of {gpu.ref} is not known (yet): ask for a fraction ('share') instead."
        )
    if memory_mib > gpu.memory_mib:
        raise Invalid(
            f"{gpu.ref} has {describe_memory(gpu.memory_mib)} of memory; "
            f"{describe_memory(memory_mib)} does not fit on it."
        )
    return share_of_memory(memory_mib, gpu.memory_mib)
