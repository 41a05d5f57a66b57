"""Kernelspecs "Python on my reservation …": one per active or upcoming reservation of the user.

jupyter_server asks its KernelSpecManager for the specs without saying who asks; the server's
subclass (server/kernelspecs.py) reads the request handler from jupyter_server's CallContext,
so the list is built for that handler's user. The
specs are not files: `gpuhive-r<ID>` names reservation ID, and its kernel_provisioner is the
`gpuhive` provisioner (kernels/provisioner.py) with `config.reservation_id`, which checks the
owner and the reservation's times at launch.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from ..model import Reservation, utcnow
from ..model.kernel import SPEC_PREFIX

log = logging.getLogger(__name__)

PREFIX = SPEC_PREFIX
PROVISIONER = "gpuhive"
NAME = re.compile(rf"{PREFIX}(\d{{1,18}})")
MAX_SPECS = 20  # the launcher gets crowded beyond this; the soonest come first


def spec_name(reservation_id: int) -> str:
    """The kernelspec name of a reservation."""
    return f"{PREFIX}{reservation_id}"


def reservation_of(kernel_name: str) -> int | None:
    """The reservation id a kernelspec name stands for, or None for any other kernel."""
    found = NAME.fullmatch(kernel_name or "")
    return int(found[1]) if found else None


def _clock(when: datetime, now: datetime, zone: tzinfo) -> str:
    """'17:00' today, 'Tue 17:00' this week, '2026-12-01 17:00' later (site time)."""
    local, today = when.astimezone(zone), now.astimezone(zone)
    if local.date() == today.date():
        return local.strftime("%H:%M")
    if abs((local.date() - today.date()).days) < 7:
        return local.strftime("%a %H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def display_name(res: Reservation, now: datetime, zone: tzinfo) -> str:
    """'Python on my reservation: gpu1:0,1 until 17:00' (upcoming ones: 'from … until …')."""
    gpus = _gpu_list(res)
    if res.start > now:
        when = f"from {_clock(res.start, now, zone)} until {_clock(res.end, now, zone)}"
    else:
        when = f"until {_clock(res.end, now, zone)}"
    return f"Python on my reservation: {gpus} {when}"


def _gpu_list(res: Reservation) -> str:
    """'gpu1:0,1 gpu2:3': GPU indices grouped by host, in the reservation's order."""
    hosts: dict[str, list[str]] = {}
    for gpu in res.gpus:
        host, _, index = gpu.ref.partition(":")
        hosts.setdefault(host, []).append(index)
    return " ".join(f"{host}:{','.join(indices)}" for host, indices in hosts.items())


def usable(res: Reservation, now: datetime) -> bool:
    """Whether a kernel may be offered on a reservation: not cancelled, not ended."""
    return not res.cancelled and res.end > now


def spec_dict(res_id: int, title: str, python: str = sys.executable) -> dict[str, Any]:
    """The kernel.json of reservation `res_id`'s kernel (argv: run on the reservation's host)."""
    return {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": title,
        "language": "python",
        "interrupt_mode": "signal",
        "env": {},
        "metadata": {
            "kernel_provisioner": {
                "provisioner_name": PROVISIONER,
                "config": {"reservation_id": res_id},
            },
            "debugger": False,
        },
    }


def resource_dir() -> str:
    """Where the specs' logos come from: ipykernel's own resources."""
    try:
        from ipykernel.kernelspec import RESOURCES
    except ImportError:  # pragma: no cover - ipykernel comes with jupyter_server's tests and Lab
        return ""
    return str(RESOURCES)


@dataclass
class SpecSource:
    """Where the specs come from: a user's reservations, the site zone, who is asking."""

    reservations: Callable[[str, datetime, datetime], Awaitable[list[Reservation]]]
    zone: tzinfo
    requester: Callable[[Any], str | None]  # a jupyter_server handler -> gpuhive user name
    ahead: timedelta = timedelta(days=31)  # how far ahead upcoming reservations are offered


class ReservationSpecs:
    """A KernelSpecManager mixin adding the requesting user's reservation kernelspecs.

    `GpuHiveApp` mixes it onto the server's configured KernelSpecManager class and sets
    `gpuhive_source`; with none (client mode) it adds nothing.
    """

    gpuhive_source: SpecSource | None = None
    _gpuhive_titles: dict[int, str]

    def current_handler(self) -> Any:
        """The request handler being answered (None: outside a request). The server's
        subclass reads it from jupyter_server (server/kernelspecs.py)."""
        return None

    async def get_all_specs(self) -> dict[str, Any]:
        """The configured specs plus one per active or upcoming reservation of the requester."""
        specs: dict[str, Any] = super().get_all_specs()  # type: ignore[misc]
        specs = {k: v for k, v in specs.items() if reservation_of(k) is None}
        for res in await self._reservations():
            specs[spec_name(res.id)] = {
                "resource_dir": resource_dir(),
                "spec": spec_dict(res.id, self._title(res)),
            }
        return specs

    def get_kernel_spec(self, kernel_name: str) -> Any:
        """A reservation's spec by name (built, no file), else the configured ones."""
        rid = reservation_of(kernel_name)
        if rid is None or self.gpuhive_source is None:
            return super().get_kernel_spec(kernel_name)  # type: ignore[misc]
        from jupyter_client.kernelspec import KernelSpec

        title = self._titles().get(rid) or f"Python on my reservation {rid}"
        return KernelSpec(resource_dir=resource_dir(), **spec_dict(rid, title))

    def _titles(self) -> dict[int, str]:
        if not hasattr(self, "_gpuhive_titles"):
            self._gpuhive_titles = {}
        return self._gpuhive_titles

    def _title(self, res: Reservation) -> str:
        zone = self.gpuhive_source.zone if self.gpuhive_source else timezone.utc
        title = display_name(res, utcnow(), zone)
        self._titles()[res.id] = title
        return title

    async def _reservations(self) -> list[Reservation]:
        """The requester's usable reservations, soonest first (none without a source or user)."""
        source = self.gpuhive_source
        if source is None:
            return []
        handler = self.current_handler()
        user = source.requester(handler) if handler is not None else None
        if user is None:
            return []
        now = utcnow()
        try:
            found = await source.reservations(user, now, now + source.ahead)
        except Exception:  # the store is down: the configured kernels are still offered
            log.exception("gpuhive: could not list %s's reservations for kernelspecs", user)
            return []
        mine = sorted((r for r in found if usable(r, now)), key=lambda r: (r.start, r.id))
        return mine[:MAX_SPECS]


def with_reservation_specs(base: type, mixin: type[ReservationSpecs] = ReservationSpecs) -> type:
    """`base` (a KernelSpecManager class) with the reservation specs (`mixin`) mixed in."""
    if issubclass(base, ReservationSpecs):
        return base
    return type(f"GpuHive{base.__name__}", (mixin, base), {})
