"""Pure value types shared by every layer (the store included); they import nothing but errors.

`core` holds identities, the inventory, reservations, instants and durations (re-exported
here); `jobs`, `rules`, `violations` and `kernel` hold the values of those areas.
"""

from .core import (
    UTC,
    Gpu,
    GpuDecl,
    Host,
    HostDecl,
    Identity,
    Reservation,
    describe_duration,
    isoformat,
    parse_duration,
    parse_instant,
    utcnow,
)

__all__ = [
    "UTC",
    "Gpu",
    "GpuDecl",
    "Host",
    "HostDecl",
    "Identity",
    "Reservation",
    "describe_duration",
    "isoformat",
    "parse_duration",
    "parse_instant",
    "utcnow",
]
