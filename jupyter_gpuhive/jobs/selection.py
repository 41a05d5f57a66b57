"""Which GPUs a job may run on when it names a vendor or a model (a site may mix vendors).

A job request may give `vendor` (a known GPU vendor's name: "nvidia", "amd", …) and `model`
(a part of the GPU's name, any case: "A100", "MI300X"). A count-only job keeps them in its
options (`options["vendor"]`, `options["model"]`) next to `gpu_count`, and the queue places
it only on matching GPUs; a job that names its GPUs (or a reservation) is checked once, when
it is created, and refused when one of them does not match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import Invalid
from ..hosts.vendors import vendor_named, vendor_of
from ..model import Gpu, HostDecl
from .admission import CHOICE

VENDOR, MODEL = CHOICE
MODEL_MAX = 100


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """What a job asks of its GPUs beyond their number: a vendor, a part of the model name."""

    vendor: str | None = None
    model: str | None = None

    def __bool__(self) -> bool:
        return self.vendor is not None or self.model is not None

    def matches(self, gpu: Gpu, vendor: str) -> bool:
        """Whether a GPU of this vendor matches (the model: a part of its name, any case)."""
        if self.vendor is not None and vendor != self.vendor:
            return False
        if self.model is None:
            return True
        return gpu.model is not None and self.model.lower() in gpu.model.lower()

    def words(self) -> str:
        """The choice as a sentence's words: 'AMD GPUs whose name holds "MI300X"'."""
        kind = f"{self.vendor.upper() if self.vendor else ''} GPUs".strip()
        return kind + (f' whose name holds "{self.model}"' if self.model else "")

    def options(self) -> dict[str, str]:
        """The choice as job options (the keys it gives)."""
        out = {VENDOR: self.vendor, MODEL: self.model}
        return {k: v for k, v in out.items() if v is not None}


def choice_of(options: Mapping[str, Any]) -> GpuChoice:
    """The vendor and model a job's options ask for (ValueError: not a known vendor, or not
    text)."""
    vendor, model = options.get(VENDOR), options.get(MODEL)
    for key, value in ((VENDOR, vendor), (MODEL, model)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"'{key}' must be a non-empty name")
        if isinstance(value, str) and len(value) > MODEL_MAX:
            raise ValueError(f"'{key}' must be at most {MODEL_MAX} characters")
    if vendor is not None:
        vendor = vendor.strip().lower()
        try:
            vendor_named(vendor)
        except Invalid as error:
            raise ValueError(str(error).rstrip(".")) from None
    return GpuChoice(vendor, model.strip() if model is not None else None)


def merged(vendor: str | None, model: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with the top-level `vendor` and `model` folded in (Invalid: given twice
    with different values)."""
    out = dict(options)
    for key, given in ((VENDOR, vendor), (MODEL, model)):
        if given is None:
            continue
        if out.get(key, given) != given:
            raise Invalid(f"Give '{key}' once: at the top level or in 'options'.")
        out[key] = given
    return out


def without(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options without the choice's keys."""
    return {k: v for k, v in options.items() if k not in (VENDOR, MODEL)}


def vendors_of(hosts: Mapping[str, HostDecl]) -> dict[str, str]:
    """Each configured host's GPU vendor, by host name."""
    return {name: vendor_of(decl.extra).name for name, decl in hosts.items()}


def vendor_at(vendors: Mapping[str, str], host: str) -> str:
    """A host's vendor (a host the configuration does not name: the default's)."""
    return vendors.get(host) or vendor_of(None).name


class SiteVendors:
    """The configured hosts' GPU vendors, as the finder asks them (bookings.finder.Vendors)."""

    def __init__(self, hosts: Callable[[], Mapping[str, HostDecl]]) -> None:
        self.hosts = hosts

    def check(self, name: str) -> str:
        try:
            vendor = choice_of({VENDOR: name}).vendor
        except ValueError as error:
            raise Invalid(f"{error}.") from None
        return vendor or name

    def of(self, host: str) -> str:
        return vendor_at(vendors_of(self.hosts()), host)


def matching(choice: GpuChoice, gpus: Iterable[Gpu], vendors: Mapping[str, str]) -> list[Gpu]:
    """The GPUs that match a choice."""
    return [g for g in gpus if choice.matches(g, vendor_at(vendors, g.host))]


def refuse_unmatched(choice: GpuChoice, gpus: Iterable[Gpu], vendors: Mapping[str, str]) -> None:
    """Invalid, in one sentence, when a GPU a job names does not match its choice."""
    for gpu in gpus:
        vendor = vendor_at(vendors, gpu.host)
        if not choice.matches(gpu, vendor):
            raise Invalid(
                f"{gpu.ref} is an {vendor.upper()} GPU ({gpu.model or 'model unknown'}), but the "
                f"job asks for {choice.words()}. Name matching GPUs, or leave out "
                "'vendor'/'model'."
            )


__all__ = [
    "MODEL",
    "VENDOR",
    "GpuChoice",
    "SiteVendors",
    "choice_of",
    "matching",
    "merged",
    "refuse_unmatched",
    "vendor_at",
    "vendors_of",
    "without",
]
