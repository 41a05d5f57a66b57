"""The persistent store: every table, read and written only through the repositories of `Store`."""

from __future__ import annotations

from .accounting import Accounting
from .approvals import Approvals
from .budgets import BudgetStore
from .clashes import Clash
from .database import Database
from .finder import FinderReads
from .health import HealthStore
from .holders import HolderReads
from .hostgroups import HostGroupStore
from .idempotency import IdempotencyKeys
from .integrations import Integrations
from .inventory import Inventory
from .jobs import Jobs
from .limits import LimitStore
from .live import LiveSweeps
from .livecounts import LiveCountReads
from .preemption import Preemption
from .reports import ReportReads
from .reservations import Changes, Reservations
from .rules import Rules
from .subscriptions import Digests, Subscriptions
from .topology import TopologyStore
from .usage import Usage
from .users import Users
from .violations import Violations


class Store:
    """All repositories over one database."""

    def __init__(self, url: str) -> None:
        self.db = Database(url)
        self.inventory = Inventory(self.db)
        self.reservations = Reservations(self.db, self.inventory)
        self.holders = HolderReads(self.db)  # current and next holder per GPU
        self.rules = Rules(self.db)
        self.users = Users(self.db)
        self.jobs = Jobs(self.db)
        self.usage = Usage(self.db)
        self.violations = Violations(self.db)
        self.limits = LimitStore(self.db)
        self.budgets = BudgetStore(self.db)  # budgets per period, their warnings
        self.accounting = Accounting(self.db)
        self.reports = ReportReads(self.db)
        self.finder = FinderReads(self.db)  # the earliest-slot search's bulk reads
        self.topology = TopologyStore(self.db)  # the vendor's topology per host
        self.health = HealthStore(self.db)  # GPU health and drains
        self.integrations = Integrations(self.db)  # feeds, webhooks and their delivery log
        self.subscriptions = Subscriptions(self.db)  # availability subscriptions
        self.digests = Digests(self.db)  # who gets a daily digest, and when it was sent
        self.live_counts = LiveCountReads(self.db)  # a Prometheus scrape's aggregates
        self.idempotency = IdempotencyKeys(self.db)  # creating POSTs' Idempotency-Key
        self.db.take_key = self.idempotency.take  # first in a keyed request's first write
        self.live_sweeps = LiveSweeps(self.db)  # the leader's sweeps, for every replica
        self.preemption = Preemption(self.db)  # loans of reserved GPUs to preemptible jobs
        self.approvals = Approvals(self.db)  # why bookings wait for approval, the answers
        self.host_groups = HostGroupStore(self.db)  # what a host group's admins set there

    def open(self) -> Store:
        """Migrate the schema and load the inventory."""
        self.db.migrate()
        self.inventory.reload()
        return self

    def close(self) -> None:
        self.db.dispose()


__all__ = ["Changes", "Clash", "Database", "Store"]
