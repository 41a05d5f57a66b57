"""The server's side of reservation kernelspecs: mix them into its KernelSpecManager.

`GpuHiveApp` calls `mix` when it is linked (before the server builds its managers), so the
configured KernelSpecManager class gains the specs of `kernels.specs`, and `attach` once the
Hive exists, so they list the requester's reservations.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jupyter_server import CallContext

from ..hive import Hive
from ..kernels.specs import ReservationSpecs, SpecSource, with_reservation_specs
from ..model import Reservation
from .kernel_manager import behind_gateway, configured, set_classes


class RequestSpecs(ReservationSpecs):
    """Reservation specs of whoever makes the current jupyter_server request."""

    def current_handler(self) -> Any:
        return CallContext.get(CallContext.JUPYTER_HANDLER)


def mix(serverapp: Any) -> bool:
    """Make the server's KernelSpecManager class offer reservation kernelspecs.

    Runs before the server reads its gateway settings, so the class's default is not asked
    for: a configured class is mixed, else jupyter_client's, except behind a kernel gateway
    (its kernels run elsewhere; False).
    """
    base = configured(serverapp, "kernel_spec_manager_class")
    if base is None:
        if behind_gateway(serverapp):
            return False
        from jupyter_client.kernelspec import KernelSpecManager

        base = KernelSpecManager
    mixed = with_reservation_specs(base, RequestSpecs)
    set_classes(serverapp, {"kernel_spec_manager_class": mixed})
    return True


def attach(serverapp: Any, hive: Hive) -> bool:
    """Point the server's spec manager at the Hive (False: it has no reservation specs)."""
    ksm = getattr(serverapp, "kernel_spec_manager", None)
    if not isinstance(ksm, ReservationSpecs):
        return False

    async def reservations(user: str, start: datetime, end: datetime) -> list[Reservation]:
        return await hive.bookings.find(start, end, user=user)

    ksm.gpuhive_source = SpecSource(reservations, hive.settings.policy.zone, requester)
    return True


def requester(handler: Any) -> str | None:
    """The gpuhive user of a jupyter_server request handler (None: nobody logged in)."""
    from .api.base import HiveHandler

    user = getattr(handler, "current_user", None)
    if user is None:
        return None
    return HiveHandler.gpuhive_user(user, handler.identity_provider)[0]
