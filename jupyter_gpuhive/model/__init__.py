"""Pure value types shared by every layer (the store included); they import nothing but errors.

`core` holds identities, the inventory, reservations, instants and durations (re-exported
here); the other modules (`jobs`, `rules`, `violations`, `kernel`, ...) hold one area's values
and are imported by their own name.
"""

from .core import (
    ID_MAX,
    UTC,
    Gpu,
    GpuDecl,
    Host,
    HostDecl,
    Identity,
    Reservation,
    ReservationStatus,
    SliceDecl,
    UnitRef,
    describe_duration,
    describe_instant,
    isoformat,
    parse_duration,
    parse_instant,
    parse_ref,
    slice_name,
    units_conflict,
    utcnow,
)

__all__ = [
    "ID_MAX",
    "UTC",
    "Gpu",
    "GpuDecl",
    "Host",
    "HostDecl",
    "Identity",
    "Reservation",
    "ReservationStatus",
    "SliceDecl",
    "UnitRef",
    "describe_duration",
    "describe_instant",
    "isoformat",
    "parse_duration",
    "parse_instant",
    "parse_ref",
    "slice_name",
    "units_conflict",
    "utcnow",
]
