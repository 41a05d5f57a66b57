"""How kernels on reservations are shown: where they run, until when, their end policy."""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import NotFound
from ..model import Identity, Reservation, utcnow
from .endpolicy import Choice, EndSettings
from .live import KernelControl, LiveKernel


class Lifecycle(Protocol):
    """What the views read of the lifecycle (kernels.lifecycle.Lifecycle)."""

    settings: EndSettings
    control: KernelControl

    def choice_of(self, kernel_id: str) -> Choice: ...
    def warned(self, kernel_id: str) -> bool: ...
    def events(self, kernel_id: str) -> list[dict[str, Any]]: ...
    async def reservation(self, reservation_id: int) -> Reservation: ...


async def listing(life: Lifecycle, who: Identity) -> dict[str, Any]:
    """`who`'s live reservation kernels (admins: all) and the site's end policies."""
    mine = [k for k in life.control.live() if who.is_admin or k.owner == who.name]
    s = life.settings
    return {
        "kernels": [await shown(life, k) for k in mine],
        "policies": list(s.allowed),
        "default": s.default,
        "fallback": s.fallback,
        "warning_minutes": s.warn_before.total_seconds() / 60,
    }


async def shown(life: Lifecycle, kernel: LiveKernel) -> dict[str, Any]:
    """One kernel: its record, its reservation's span and what happens at the end."""
    choice = life.choice_of(kernel.kernel_id)
    out: dict[str, Any] = {
        "id": kernel.kernel_id,
        "owner": kernel.owner,
        "reservation_id": kernel.reservation_id,
        "host": getattr(kernel, "host", None),
        "gpus": list(getattr(kernel, "gpus", ()) or ()),
        "state": getattr(kernel, "state", None),
        "policy": choice.policy,
        "fallback": choice.fallback,
        "warned": life.warned(kernel.kernel_id),
        "events": life.events(kernel.kernel_id),
    }
    try:
        res = await life.reservation(kernel.reservation_id)
    except NotFound:
        return out
    end = res.cancelled_at if res.cancelled_at and res.cancelled_at < res.end else res.end
    out.update(
        start=res.start.isoformat(),
        end=end.isoformat(),
        seconds_left=max(0.0, (end - utcnow()).total_seconds()),
    )
    if not out["gpus"]:
        out["gpus"] = [g.ref for g in res.gpus]
    if out["host"] is None and res.gpus:
        out["host"] = res.gpus[0].host
    return out
