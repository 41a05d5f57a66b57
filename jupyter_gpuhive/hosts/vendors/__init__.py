"""GPU vendors: what gpuhive asks a host's GPU tool, and how it reads the answers.

A `Vendor` gives the probe its GPU part (shell that prints the vendor's sections and leaves the
GPU processes' PIDs in `$pids`), reads those sections into vendor-neutral values
(model/gpus.py), says how a process or container is pinned to devices, and lists the doctor's
checks. A host names its vendor in its entry (`vendor`, default `nvidia`); vendors are found
by name in the entry point group `jupyter_gpuhive.vendors` (a site's package registers its
own) or registered at run time with `register`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from ...errors import Invalid
from .vendor import DoctorCheck as DoctorCheck
from .vendor import DoctorOutput as DoctorOutput
from .vendor import Sections as Sections
from .vendor import Vendor

GROUP = "jupyter_gpuhive.vendors"
DEFAULT = "nvidia"


_registered: dict[str, Callable[[], Vendor]] = {}
BUILTIN = ("nvidia", "amd")  # shipped with gpuhive (also entry points in pyproject.toml)


def _builtin(name: str) -> Vendor:
    if name == "amd":
        from .amd import AmdVendor

        return AmdVendor()
    from .nvidia import NvidiaVendor

    return NvidiaVendor()


def register(name: str, factory: Callable[[], Vendor]) -> None:
    """Make a vendor known by name (besides the entry points), e.g. from a site's plugin."""
    _registered[name] = factory
    vendor_named.cache_clear()


def unregister(name: str) -> None:
    """Forget a vendor `register` made known (a test's, a plugin's being unloaded)."""
    _registered.pop(name, None)
    vendor_named.cache_clear()


@functools.cache
def vendor_named(name: str) -> Vendor:
    """The vendor of this name: registered at run time, or from the entry point group."""
    factory = _registered.get(name)
    if factory is None:
        found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
        if not found and name in BUILTIN:  # not installed as a distribution (a checkout)
            return _builtin(name)
        if not found:
            names = (*_registered, *BUILTIN, *(ep.name for ep in entry_points(group=GROUP)))
            known = sorted(set(names))
            raise Invalid(f"No GPU vendor {name!r}; known: {', '.join(known) or 'none'}.")
        factory = found[0].load()
    vendor = factory()
    if not isinstance(vendor, Vendor):
        raise Invalid(f"GPU vendor {name!r} is not a jupyter_gpuhive Vendor: {vendor!r}")
    return vendor


def vendor_of(extra: Mapping[str, Any] | None) -> Vendor:
    """The vendor a host entry names (its `extra` settings), default nvidia."""
    name = (extra or {}).get("vendor") or DEFAULT
    return vendor_named(str(name))


def default_vendor() -> Vendor:
    """The vendor of a host that names none."""
    return vendor_named(DEFAULT)
