"""How the API shows jobs and reservations: as the requester may see them (privacy.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...model import Reservation
from ...model.authority import sees_hosts
from ...model.jobs import Job
from ...privacy import job_json, reservation_json
from .base import HiveLogic

# A listing's lending choices (reservation -> lend, reclaim early) and loans (-> jobs).
# as the store reads it (store.preemption.LendingShown): choices, the jobs loans run
Lending = tuple[dict[int, tuple[bool, bool]], dict[int, list[dict[str, Any]]]]


class Shown(HiveLogic):
    """Serializes jobs and reservations as the requester may see them (privacy.py)."""

    def job(self, job: Job) -> dict[str, Any]:
        return job_json(job, self.who, self.hive.settings.privacy)

    def reservation(
        self, res: Reservation, now: datetime | None = None, lending: Lending | None = None
    ) -> dict[str, Any]:
        data = reservation_json(res, self.who, self.hive.settings.privacy, now)
        configured = {host.name for host in self.hive.settings.hosts}
        data["hosts_gone"] = sorted({gpu.host for gpu in res.gpus} - configured)
        data["may_approve"] = res.tentative and sees_hosts(self.who, {g.host for g in res.gpus})
        if lending is not None:
            choice, lent = lending
            data["lend"], data["reclaim_before_start"] = choice.get(res.id, (True, False))
            data["lent_to"] = lent.get(res.id, [])
        return data

    async def lending(self, found: list[Reservation]) -> Lending:
        """Each reservation's lending choice and the jobs its GPUs run now."""
        shown: Lending = await self.hive.bookings.lending_shown([r.id for r in found])
        return shown

    async def shown(self, res: Reservation, now: datetime | None = None) -> dict[str, Any]:
        return self.reservation(res, now, await self.lending([res]))
