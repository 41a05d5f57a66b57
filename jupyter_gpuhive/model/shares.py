"""Shares of a GPU: a part of one shareable GPU, held in millionths so that sums are exact.

A booking asks for a share as a fraction (0.25) or as memory ('20G', '512M', or a number
of MiB); memory becomes the smallest number of millionths that holds at least that much of
the GPU's memory, so that shares that add up to at most one whole GPU also add up to at most
its memory. A whole-GPU booking is a share of WHOLE.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from ..errors import Invalid

WHOLE = 1_000_000  # a share is stored in millionths of a GPU; a whole GPU is WHOLE
SMALLEST = 1e-6  # the smallest fraction that is more than nothing

# '20G', '20 GiB', '20GB', '512M', '512MiB', '1.5G': G, GB and GiB all mean GiB (as the
# drivers and the frameworks count), M, MB and MiB MiB; a bare number is MiB.
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:(g|gb|gib)|(m|mb|mib))?\s*$", re.IGNORECASE)


def parse_memory(value: Any, name: str = "memory") -> int:
    """MiB from '20G', '20GiB', '512M', '512MiB' or a number of MiB; Invalid otherwise."""
    if isinstance(value, bool) or value is None:
        raise Invalid(f"'{name}' must be memory such as '20G', '512M' or a number of MiB.")
    if isinstance(value, (int, float)):
        mib = float(value)
    else:
        found = _MEMORY.match(str(value))
        if found is None:
            raise Invalid(
                f"'{name}' must be memory such as '20G' (GiB), '512M' (MiB) or a number of "
                f"MiB, not {str(value)[:40]!r}."
            )
        mib = float(found[1]) * (1024 if found[2] else 1)
    if not math.isfinite(mib) or mib < 1:
        raise Invalid(f"'{name}' must be at least 1 MiB.")
    return math.ceil(mib)


def share_of_fraction(value: Any, name: str = "share") -> int:
    """Millionths of a GPU from a fraction in (0, 1] (0.25, or '1/4'); Invalid otherwise."""
    if isinstance(value, bool):
        raise Invalid(f"'{name}' must be a fraction of one GPU, such as 0.25.")
    try:
        exact = Fraction(str(value).strip()) if isinstance(value, str) else Fraction(value)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        raise Invalid(f"'{name}' must be a fraction of one GPU, such as 0.25.") from None
    if exact <= 0 or exact > 1:
        raise Invalid(
            f"'{name}' must be more than 0 and at most 1 (a whole GPU); {float(exact):g} is not."
        )
    return max(1, math.ceil(exact * WHOLE))


def share_of_memory(mib: int, gpu_mib: int) -> int:
    """The smallest share (millionths) of a GPU with `gpu_mib` MiB that holds `mib` MiB."""
    return min(WHOLE, max(1, -(-mib * WHOLE // gpu_mib)))


def memory_of_share(share: int, gpu_mib: int | None) -> int | None:
    """The MiB a share of a GPU with `gpu_mib` MiB holds (None: memory unknown)."""
    return None if gpu_mib is None else share * gpu_mib // WHOLE


def fraction(share: int) -> float:
    """A share in millionths as a fraction of one GPU."""
    return share / WHOLE


def describe_share(share: int, gpu_mib: int | None = None) -> str:
    """'a whole GPU', or '0.25 of a GPU (20 GiB)'."""
    if share >= WHOLE:
        return "a whole GPU"
    mib = memory_of_share(share, gpu_mib)
    memory = f" ({describe_memory(mib)})" if mib is not None else ""
    return f"{fraction(share):.4g} of a GPU{memory}"


def describe_memory(mib: int) -> str:
    """'20 GiB', '20.5 GiB' or '512 MiB'."""
    return f"{mib / 1024:.4g} GiB" if mib >= 1024 else f"{mib} MiB"
