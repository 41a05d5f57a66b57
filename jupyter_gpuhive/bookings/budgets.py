"""Budgets: admins' changes, what each budget stands at, the booking guard, the queue's
question (whose budget is spent) and each group's statement (model/budgets.py says what
counts).

The guard runs inside the booking's own transaction (the limits' guard calls it,
bookings/quotas.py): it reads the budgets of the booking's owner and of the owner's groups,
locks them (store/budgets.py), then reads what counts against each and refuses (409) what
would overrun one, saying what is left and when it renews.
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta, tzinfo
from typing import Any, Protocol, TypeVar

from ..errors import Conflict, NotFound
from ..model import Identity, utcnow
from ..model.authority import BUDGETS, WRITE, Authority, sees_hosts
from ..model.budgets import Budget, Figures, Standing
from ..model.errand import Errand
from ..model.shares import fraction
from ..store import Store
from ..store.limits import LimitReads
from ..store.reservations import PendingWrite

STATEMENT_COLUMNS = ("user", "host", "kind", "gpu_hours", "kwh")


class Queued(Protocol):
    """A queued job as the queue's pass holds it (jobs/plan.py Candidate)."""

    @property
    def job_id(self) -> int: ...

    @property
    def owner(self) -> str: ...


C = TypeVar("C", bound=Queued)
# (budget standing, threshold in percent, whom): a warning for the usual channels
Warn = Callable[[Standing, float, list[str]], Any]


def grows(booking: PendingWrite) -> bool:
    """Whether a write asks for more than the reservation held (a new one always does)."""
    old = booking.old
    return old is None or (
        booking.start != old.start
        or booking.end > old.end
        or len(booking.gpu_ids) > len(old.gpus)
        or booking.share > old.share_ppm
    )


class BudgetService:
    """Budgets as admins set them and as bookings and jobs spend them."""

    def __init__(
        self,
        store: Store,
        zone: tzinfo,
        identity_of: Callable[[str], Identity],
        authority: Authority | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.zone = zone
        self.identity_of = identity_of
        self.authority = authority or Authority()
        self.now = clock
        self.warn: Warn | None = None  # set where warnings go out (the Hive's integrations)

    # --- the guard ---------------------------------------------------------------------

    def check(self, reads: LimitReads, booking: PendingWrite, owner: Identity) -> None:
        """Refuse (409) a booking that would overrun a budget of its owner or their groups."""
        if not grows(booking):
            return  # shorter, renamed: never refused
        within = reads.budgets()
        found = within.applicable(owner.name, owner.groups)
        if not found:
            return
        within.lock(b.id for b in found)  # before reading what counts against them
        now = self.now()
        start = max(booking.start, now)
        gpus = len(booking.gpu_ids) * fraction(booking.share)
        exclude = booking.old.id if booking.old is not None else None
        for budget in found:
            for period in budget.periods(start, booking.end, self.zone):
                hours = gpus * period.hours_of(start, booking.end)
                if hours <= 0:
                    continue
                asked = Figures(hours, hours * budget.kwh_per_gpu_hour)
                extra = [owner.name]
                # far from the end an upper bound of what is booked ahead answers (cheap)
                bound = within.standing_in(
                    budget, period, now, self.zone, extra=extra, exclude=exclude, bound=True
                )
                if bound.refusal(asked, self.zone) is None:
                    continue
                standing = within.standing_in(
                    budget, period, now, self.zone, extra=extra, exclude=exclude
                )
                why = standing.refusal(asked, self.zone)
                if why is not None:
                    raise Conflict(why, budget=standing.to_json())

    def check_job(
        self,
        owner: Identity,
        gpus: float,
        walltime: timedelta | None,
        start: datetime | None = None,
        what: str = "This job",
    ) -> None:
        """Refuse (409) a job outside any booking whose `gpus` × `walltime` (from `start`,
        default now) would overrun a budget of its owner or their groups. Without a walltime
        its length is unknown: refused only when a budget is spent already."""
        if gpus <= 0:
            return
        found = self.store.budgets.applicable(owner.name, owner.groups)
        now = self.now()
        begin = max(start or now, now)
        for budget in found:
            if walltime is None:
                standing = self.standing(budget, begin)
                if standing is not None and standing.exhausted():
                    raise Conflict(
                        f"{what} has no walltime, and {self._spent_words(standing)}",
                        budget=standing.to_json(),
                    )
                continue
            end = begin + walltime
            for period in budget.periods(begin, end, self.zone):
                hours = gpus * period.hours_of(begin, end)
                if hours <= 0:
                    continue
                asked = Figures(hours, hours * budget.kwh_per_gpu_hour)
                standing = self.store.budgets.standing(
                    budget, period.start, now, self.zone, extra=[owner.name]
                )
                why = None if standing is None else standing.refusal(asked, self.zone)
                if why is not None:
                    assert standing is not None
                    raise Conflict(
                        f"{what} ({gpus:g} GPU × {walltime.total_seconds() / 3600:g} h "
                        f"outside any booking): {why}",
                        budget=standing.to_json(),
                    )

    def _spent_words(self, standing: Standing) -> str:
        return (
            f"the budget of {standing.budget.subject} for {standing.period.label} is spent "
            f"({standing.percent():.0f} %). {standing.renewal(self.zone)}"
        )

    # --- what stands -------------------------------------------------------------------

    def standing(self, budget: Budget, at: datetime | None = None) -> Standing | None:
        """A budget in the period `at` (default now) falls in (None: outside its dates)."""
        now = self.now()
        return self.store.budgets.standing(budget, at or now, now, self.zone)

    def spent(self, owners: Iterable[str]) -> dict[str, str]:
        """Why each of `owners` whose budget is spent now waits (the queue's question)."""
        wanted = set(owners)
        if not wanted:
            return {}
        every = self.store.budgets.all()
        if not every:
            return {}
        why: dict[str, str] = {}
        cache: dict[int, Standing | None] = {}
        for owner in sorted(wanted):
            who = self.identity_of(owner)
            for budget in every:
                if not budget.applies_to(owner, who.groups):
                    continue
                if budget.id not in cache:
                    cache[budget.id] = self.standing(budget)
                standing = cache[budget.id]
                if standing is not None and standing.exhausted():
                    why[owner] = self._spent_words(standing)
                    break
        return why

    def hold(self, queued: list[C]) -> tuple[list[C], dict[int, str]]:
        """The queue's candidates whose owners may run, and why each other one waits."""
        spent = self.spent({job.owner for job in queued})
        held = {job.job_id: spent[job.owner] for job in queued if job.owner in spent}
        return [job for job in queued if job.job_id not in held], held

    def crossed(self) -> list[tuple[Standing, float, list[str]]]:
        """The thresholds budgets crossed since they were last looked at (each warned about
        once per period: the store keeps which), with the people to tell: the user, or the
        group's members and its host group's named administrators."""
        now = self.now()
        found: list[tuple[Standing, float, list[str]]] = []
        for budget in self.store.budgets.all():
            standing = self.standing(budget)
            if standing is None or not budget.warn_at:
                continue
            percent = standing.percent()
            for threshold in budget.warn_at:
                if percent + 1e-9 >= threshold and self.store.budgets.warned(
                    budget.id, standing.period.start, threshold, now
                ):
                    found.append((standing, threshold, self.people(budget)))
        return found

    def people(self, budget: Budget) -> list[str]:
        """Whom a budget's warnings reach."""
        if budget.scope == "user":
            return [budget.name]
        group = self.authority.groups.get(budget.name)
        admins = sorted(group.admins) if group is not None else []
        return sorted({*self.store.budgets.members(budget.name), *admins})

    async def tick(self, now: datetime) -> None:
        """Warn about the thresholds crossed (the leader's ticker calls it, with bookings
        made and use measured in between)."""
        if self.warn is None:
            return
        for standing, threshold, people in await asyncio.to_thread(self.crossed):
            self.warn(standing, threshold, people)

    # --- reading, as a requester may --------------------------------------------------

    def visible(self, who: Identity, budget: Budget) -> bool:
        """Site admins see every budget; others their own, their groups', and those of the
        groups whose hosts they administer (a host group of the same name)."""
        if who.is_admin or budget.applies_to(who.name, who.groups):
            return True
        return budget.scope == "group" and self._administers(who, budget.name)

    def _administers(self, who: Identity, group: str) -> bool:
        hosts = self.authority.hosts_of([group])
        return bool(hosts) and sees_hosts(who, hosts)

    def listed(self, who: Identity) -> list[dict[str, Any]]:
        """The budgets `who` may see, each with its standing now."""
        out = []
        for budget in self.store.budgets.all():
            if self.visible(who, budget):
                out.append(self._shown(budget))
        return out

    def _shown(self, budget: Budget) -> dict[str, Any]:
        standing = self.standing(budget)
        return {**budget.to_json(), "standing": None if standing is None else standing.to_json()}

    def one(self, who: Identity, budget_id: int, at: datetime | None = None) -> dict[str, Any]:
        """One budget and its standing (in the period of `at`); 404 for one not shown."""
        budget = self.store.budgets.get(budget_id)
        if not self.visible(who, budget):
            raise NotFound(f"There is no budget {budget_id}.")
        standing = self.standing(budget, at)
        return {**budget.to_json(), "standing": None if standing is None else standing.to_json()}

    # --- admins' changes ---------------------------------------------------------------

    def add(self, who: Identity, budget: Budget, errand: Errand | None = None) -> dict[str, Any]:
        """Add a budget (site admins; `errand`: the API request it is part of)."""
        self.authority.require(who, BUDGETS, WRITE)
        saved = self.store.budgets.add(budget.checked(), who.name, self.now(), errand)
        return self._shown(saved)

    def replace(self, who: Identity, budget_id: int, budget: Budget) -> dict[str, Any]:
        self.authority.require(who, BUDGETS, WRITE)
        saved = self.store.budgets.replace(budget_id, budget.checked(), who.name, self.now())
        return self._shown(saved)

    def remove(self, who: Identity, budget_id: int) -> None:
        self.authority.require(who, BUDGETS, WRITE)
        self.store.budgets.remove(budget_id)

    # --- statements --------------------------------------------------------------------

    def statement(
        self, who: Identity, budget_id: int, at: datetime | None = None
    ) -> dict[str, Any]:
        """Who used what on which hosts in a budget's period: its subject's members' charges."""
        budget = self.store.budgets.get(budget_id)
        self.authority.require(
            who, BUDGETS, "statement",
            owner=budget.name if budget.scope == "user" else None,
            hosts=self.authority.hosts_of([budget.name]) if budget.scope == "group" else (),
            thing=f"it shows who of {budget.subject} used what",
        )  # fmt: skip
        standing = self.standing(budget, at)
        if standing is None:
            raise NotFound(f"Budget {budget_id} has no period then (it runs over its dates only).")
        members = (
            [budget.name] if budget.scope == "user" else self.store.budgets.members(budget.name)
        )
        rows = self.store.budgets.statement(members, standing.period)
        return {"budget": budget.to_json(), "standing": standing.to_json(), "rows": rows}


def statement_csv(data: Mapping[str, Any]) -> str:
    """A statement as CSV: one line per user, host and kind of use."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(STATEMENT_COLUMNS)
    for row in data["rows"]:
        writer.writerow([row[c] for c in STATEMENT_COLUMNS])
    return out.getvalue()
