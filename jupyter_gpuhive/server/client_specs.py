"""Client mode: the "Python on my reservation …" kernelspecs, from the team's service.

A client-mode server has no store: its kernelspec list (kernels/specs.py) asks the service
for the reservations of this server's user, the owner of its Hub token, who is also the only
one the service will start these kernels for (kernels/broker.py).
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any
from urllib.parse import urlencode

from ..kernels.specs import ReservationSpecs, SpecSource
from ..model import Gpu, Reservation, parse_ref
from .service_link import ServiceLink


def gpu_of(ref: str, uuid: str = "") -> Gpu:
    """A GPU (or MIG slice) as far as its name tells ('host:index' or 'host:index/migG.C')."""
    found = parse_ref(ref)
    if found is None:
        return Gpu(id=0, host=ref, index=0, uuid=uuid)
    return Gpu(id=0, host=found.host, index=found.index, uuid=uuid,
               parent_id=0 if found.is_slice else None, gpu_instance_id=found.gpu_instance_id,
               compute_instance_id=found.compute_instance_id)  # fmt: skip


def reservation_of(data: dict[str, Any]) -> Reservation:
    """A reservation from the service's JSON (what the kernelspecs show of it)."""
    uuids = list(data.get("gpu_uuids") or [])
    gpus = tuple(gpu_of(ref, uuids[i] if i < len(uuids) else "")
                 for i, ref in enumerate(data["gpus"]))  # fmt: skip
    cancelled = data.get("cancelled_at")
    return Reservation(
        id=int(data["id"]), owner=str(data["owner"]), title=str(data.get("title") or ""),
        description=str(data.get("description") or ""),
        start=datetime.fromisoformat(data["start"]), end=datetime.fromisoformat(data["end"]),
        gpus=gpus, created_at=datetime.fromisoformat(data["created_at"]),
        cancelled_at=datetime.fromisoformat(cancelled) if cancelled else None,
    )  # fmt: skip


def attach(serverapp: Any, link: ServiceLink, zone: tzinfo) -> bool:
    """List this server's user's reservations as kernelspecs (False: no reservation specs)."""
    ksm = getattr(serverapp, "kernel_spec_manager", None)
    if not isinstance(ksm, ReservationSpecs):
        return False
    me: list[str] = []

    async def reservations(user: str, start: datetime, end: datetime) -> list[Reservation]:
        if not me:  # whoever visits this server, its kernels run as its token's owner
            me.append(str((await link.call("GET", "me"))["name"]))
        query = urlencode({"user": me[0], "start": start.isoformat(), "end": end.isoformat()})
        found = await link.call("GET", f"reservations?{query}")
        return [reservation_of(r) for r in found["reservations"]]

    ksm.gpuhive_source = SpecSource(reservations, zone, _anyone)
    return True


def _anyone(handler: Any) -> str | None:
    """Any logged-in visitor sees this server's user's specs (the Hub decides who visits)."""
    return "server" if getattr(handler, "current_user", None) is not None else None
