"""Fair share: the facade the API calls for limits, usage scores and accounting reports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from itertools import pairwise
from typing import Any

from ..errors import Forbidden
from ..model import Identity, describe_duration, utcnow
from ..model.authority import Authority
from ..model.hostgroups import NoShowTimes
from ..model.limits import Limits, LimitTable, Tier
from ..model.violations import FOREIGN, NO_SHOW, UNRESERVED
from ..privacy import Privacy
from ..store import Store
from . import accounting
from .budgets import BudgetService
from .hostgroups import GroupLimits, HostGroupService
from .quotas import LimitService

Run = Callable[..., Awaitable[Any]]
# Re-checks reservations' flags, as a change by someone for a reason: Bookings.reflag
Reflag = Callable[[str, str], Awaitable[dict[int, "str | None"]]]
LIMITS_CHANGED = "limits changed"


async def no_reflag(by: str, reason: str) -> dict[int, str | None]:
    """No reservations to re-flag: for a FairShare that reports only (no bookings service)."""
    return {}


@dataclass(frozen=True)
class FairShareSettings:
    """Configured limits and tiers, the score window, and metering."""

    limits: LimitTable = field(default_factory=LimitTable)
    score_window: timedelta = timedelta(days=30)
    max_gap: float = 0.0  # seconds between two samples charged at most; 0: 3 sweeps, ≥ 60 s
    # who administers which host groups (a group's statement): the policy's (HiveSettings)
    authority: Authority = field(default_factory=Authority, compare=False)
    # the site's no-show times, which a host group's own replace on its hosts (HiveSettings)
    noshow: NoShowTimes = field(default_factory=NoShowTimes)


class FairShare:
    """Limits (what applies to whom, admin changes), usage scores, accounting reports."""

    def __init__(
        self,
        store: Store,
        run: Run,
        settings: FairShareSettings,
        zone: tzinfo,
        identity_of: Callable[[str], Identity],
        privacy: Privacy,
        *,
        reflag: Reflag,
        unix_user: Callable[[str], str] = lambda name: name,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.run = run
        self.settings = settings
        self.zone = zone
        self.identity_of = identity_of
        self.privacy = privacy
        self.reflag = reflag
        self.unix_user = unix_user
        self.now = clock
        self.window_text = describe_duration(settings.score_window)
        self.limits = LimitService(
            store, zone, settings.limits, identity_of,
            efficiency=self.efficiency, window=self.window_text, clock=clock,
        )  # fmt: skip
        self.budgets = BudgetService(store, zone, identity_of, settings.authority, clock=clock)
        self.limits.budgets = self.budgets  # checked in each booking's transaction too
        self.limits.on_groups = GroupLimits(settings.authority, zone, clock)  # host groups' own
        self.host_groups = HostGroupService(store, settings.authority, settings.noshow, clock=clock)

    # --- limits ----------------------------------------------------------------------------

    async def view(self, who: Identity) -> dict[str, Any]:
        """The requester's limits and figures; for admins also every stored and configured one."""
        mine = await self.run(self.limits.figures, who)
        out: dict[str, Any] = {"mine": mine}
        if who.is_admin:
            table = await self.run(self.limits.table)
            out["table"] = table.to_json()
            out["configured"] = self.limits.configured.to_json()
        return out

    async def set(self, who: Identity, scope: str, name: str, limits: Limits) -> dict[str, Any]:
        """Store one scope's limits, then flag (never delete) what is over them now."""
        found = await self.run(self.limits.set, who, scope, name, limits)
        flags = await self.reflag(who.name, LIMITS_CHANGED)
        return {"scope": scope, "name": name or None, "limits": found.to_json(),
                "flag_changes": flags}  # fmt: skip

    async def set_group_limits(
        self, who: Identity, group: str, limits: Limits | None
    ) -> dict[str, Any]:
        """Set (None: forget) a host group's own limits, then flag what is over them now."""
        shown = await self.run(self.host_groups.set_limits, who, group, limits)
        return {**shown, "flag_changes": await self.reflag(who.name, LIMITS_CHANGED)}

    async def remove(self, who: Identity, scope: str, name: str) -> dict[str, Any]:
        """Forget one scope's stored limits, then re-flag."""
        await self.run(self.limits.remove, who, scope, name)
        return {"deleted": True, "flag_changes": await self.reflag(who.name, LIMITS_CHANGED)}

    async def set_tiers(self, who: Identity, tiers: tuple[Tier, ...]) -> dict[str, Any]:
        """Replace the tiers, then re-flag."""
        found = await self.run(self.limits.set_tiers, who, tiers)
        flags = await self.reflag(who.name, LIMITS_CHANGED)
        return {"tiers": [t.to_json() for t in found], "flag_changes": flags}

    # --- usage scores ------------------------------------------------------------------------

    def score_window(self, days: float | None) -> tuple[datetime, datetime]:
        now = self.now()
        span = accounting.window_days(days) if days else self.settings.score_window
        return now - span, now

    def compute_scores(
        self, start: datetime, end: datetime, users: list[str] | None
    ) -> list[dict[str, Any]]:
        """Scores over [start, end) of `users` (None: everyone with something in it)."""
        acc = self.store.accounting
        booked = acc.booked(start, end, users)
        charges = acc.by_payer(start, end, users)
        no_shows = acc.incidents(start, end, (NO_SHOW,), "holder")
        caused = acc.incidents(start, end, (FOREIGN, UNRESERVED), "offender")
        if users is None:
            users = sorted({b.owner for b in booked} | {p for p, _ in charges if p})
        return accounting.scores(users, booked, charges, no_shows, caused, start, end,
                                 self.unix_user)  # fmt: skip

    def efficiency(self, user: str) -> float | None:
        """A user's efficiency (percent) over the score window (for tiers)."""
        start, end = self.score_window(None)
        (score,) = self.compute_scores(start, end, [user])
        return score["efficiency"]  # type: ignore[no-any-return]

    async def scores(self, who: Identity, days: float | None, user: str | None) -> dict[str, Any]:
        """Usage scores: one's own, or (admins, or with public usage) anyone's or everyone's."""
        start, end = self.score_window(days)
        everyone = who.is_admin or self.privacy.public_usage
        if user is not None and user != who.name and not everyone:
            raise Forbidden(f"The usage score of {user} is shown to them and to admins only.")
        users = [user] if user else (None if everyone else [who.name])
        found = await self.run(self.compute_scores, start, end, users)
        return {"start": start.isoformat(), "end": end.isoformat(), "window": self.window_text
                if days is None else describe_duration(end - start), "scores": found}  # fmt: skip

    # --- the accounting report ---------------------------------------------------------------

    def compute_report(self, months: list[date]) -> dict[str, Any]:
        """The report of `months` for everyone (see `accounting.report`)."""
        first = accounting.month_start(months[0], self.zone)
        last = accounting.month_start(months[-1], self.zone)
        reads = self.store.reports
        by_payer, by_host = reads.charges(first, last)
        ends = [*months, accounting.next_month(months[-1])]  # consecutive months
        edges = [accounting.month_start(m, self.zone) for m in ends]
        spans = list(pairwise(edges))
        booked = reads.reserved(spans, self.now())
        reserved = {m.strftime("%Y-%m"): b for m, b in zip(months, booked, strict=True)}

        def groups_of(user: str) -> frozenset[str]:
            return self.identity_of(user).groups

        return accounting.report(months, self.zone, by_payer, by_host, reserved, groups_of)

    async def report(self, who: Identity, first: date, last: date | None) -> dict[str, Any]:
        """The report of a month (or several), as `who` may see it."""
        months = accounting.months_between(first, last or first)
        data = await self.run(self.compute_report, months)
        if who.is_admin or self.privacy.public_usage:
            return data
        return accounting.visible(data, who.name, who.groups)
