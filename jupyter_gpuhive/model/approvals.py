"""Approvals (issue #46, item 4): which bookings wait for an administrator's yes.

A site sets thresholds per host or per host group (`c.GpuHiveApp.approvals`). A booking that
passes the threshold of one of its hosts (its GPU-hours, share-weighted, or its number of
GPUs) is made *tentative*: it holds its slot like any booking, but nothing may run on it
until one of the hosts' group administrators (or a site admin) approves it. Left unanswered
for `hold`, it is released and its holder told. Administrators of all of a booking's hosts
(and site admins) book without approval: they would approve their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from ..errors import Invalid
from .core import Reservation, describe_duration

APPROVED, DECLINED, EXPIRED = "approved", "declined", "expired"  # the answers
DEFAULT_HOLD = timedelta(hours=48)


@dataclass(frozen=True)
class Threshold:
    """Above what a booking needs approval on a host: GPU-hours and/or GPUs (None: no bound)."""

    gpu_hours: float | None = None
    gpus: int | None = None

    def passed_by(self, gpus: int, gpu_hours: float) -> str | None:
        """Why a booking of `gpus` GPUs and `gpu_hours` GPU-hours needs approval (None: it
        does not)."""
        if self.gpus is not None and gpus > self.gpus:
            return f"{gpus} GPUs is more than {self.gpus}"
        if self.gpu_hours is not None and gpu_hours > self.gpu_hours:
            return f"{gpu_hours:g} GPU-hours is more than {self.gpu_hours:g}"
        return None


@dataclass(frozen=True)
class ApprovalRules:
    """The site's thresholds, by host name or host group name, and how long a tentative
    booking holds its slot unanswered."""

    thresholds: Mapping[str, Threshold] = field(default_factory=dict)
    hold: timedelta = DEFAULT_HOLD

    def needed(
        self, res: Reservation, group_of: Callable[[str], str | None]
    ) -> tuple[str, frozenset[str]] | None:
        """Why `res` needs approval and the hosts whose thresholds it passes (None: it needs
        none). A host's own threshold comes before its group's."""
        if not self.thresholds:
            return None
        hours = round(res.gpu_hours(), 4)
        reasons: dict[str, str] = {}
        hosts: set[str] = set()
        for host in sorted({g.host for g in res.gpus}):
            group = group_of(host)
            key = host if host in self.thresholds else group
            threshold = self.thresholds.get(key) if key else None
            why = threshold.passed_by(len(res.gpus), hours) if threshold else None
            if why:
                where = f"host {host}" if key == host else f"host group {key}"
                reasons.setdefault(f"{why} on {where}", host)
                hosts.add(host)
        if not hosts:
            return None
        return "; ".join(reasons), frozenset(hosts)


def parse_approvals(
    spec: Mapping[str, object], hold: timedelta, hosts: Iterable[str], groups: Iterable[str]
) -> ApprovalRules:
    """`c.GpuHiveApp.approvals` read: {host or host group: {"gpu_hours": 24, "gpus": 4}}."""
    known_hosts, known_groups = set(hosts), set(groups)
    thresholds: dict[str, Threshold] = {}
    for name, value in spec.items():
        where = f"approvals[{name!r}]"
        if name not in known_hosts and name not in known_groups:
            raise Invalid(
                f"{where}: {name!r} is neither a configured host nor a host group "
                f"(c.GpuHiveApp.host_groups: {', '.join(sorted(known_groups)) or 'none'})."
            )
        if not isinstance(value, Mapping) or not value or set(value) - {"gpu_hours", "gpus"}:
            raise Invalid(f"{where} must be {{'gpu_hours': number, 'gpus': number}} (either).")
        gpu_hours, gpus = value.get("gpu_hours"), value.get("gpus")
        for key, number in (("gpu_hours", gpu_hours), ("gpus", gpus)):
            if number is not None and (
                isinstance(number, bool) or not isinstance(number, int | float) or number < 0
            ):
                raise Invalid(f"{where}['{key}'] must be a number of at least 0.")
        if gpus is not None and not float(gpus).is_integer():  # type: ignore[arg-type]
            raise Invalid(f"{where}['gpus'] must be a whole number.")
        thresholds[str(name)] = Threshold(
            None if gpu_hours is None else float(gpu_hours),  # type: ignore[arg-type]
            None if gpus is None else int(gpus),  # type: ignore[call-overload]
        )
    if hold <= timedelta(0):
        raise Invalid("approval_hold must be longer than nothing, e.g. '48h'.")
    return ApprovalRules(thresholds, hold)


def tentative_refusal(res: Reservation, doing: str) -> str:
    """The 409 for using a booking that waits for approval."""
    return (
        f"Reservation {res.id} is tentative: it waits for an administrator's approval, and "
        f"nothing may {doing} on it until it is approved. Its slot is held for you meanwhile."
    )


def hold_text(hold: timedelta) -> str:
    """How long a tentative booking is held, in words."""
    return describe_duration(hold)
