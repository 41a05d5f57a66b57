"""What the Hive needs from configuration: one settings value per service, and the store's URL."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from .bookings.fairshare import FairShareSettings
from .bookings.reservations import Policy
from .hosts.pool import SshSettings
from .integrations import IntegrationSettings
from .integrations.transport import Transports
from .jobs.preemption import PreemptionSettings
from .kernels.endpolicy import EndSettings
from .model import HostDecl
from .model.hostgroups import NoShowTimes
from .privacy import Privacy
from .protection.service import ProtectionSettings


@dataclass
class HiveSettings:
    """Everything the core needs from configuration."""

    db_url: str
    policy: Policy
    http: Transports  # how HTTP leaves (webhooks): the server's transport, or a test's
    hosts: list[HostDecl] = field(default_factory=list)
    groups: Mapping[str, Iterable[str]] = field(default_factory=dict)
    workers: int = 8
    ssh: SshSettings = field(default_factory=SshSettings)
    poll_interval: float = 5.0
    history: int = 720
    monitor: bool = True
    protection: ProtectionSettings = field(default_factory=ProtectionSettings)
    privacy: Privacy = field(default_factory=Privacy)
    integrations: IntegrationSettings = field(default_factory=IntegrationSettings)
    fairshare: FairShareSettings = field(default_factory=FairShareSettings)
    kernel_end: EndSettings = field(default_factory=EndSettings)
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    metrics_token: str = ""  # the Prometheus scrape's bearer token ("": admins only)

    def __post_init__(self) -> None:
        if self.policy is not None:  # who administers which hosts: the hosts used now
            self.policy.authority.hosts = lambda: self.hosts
            authority, p = self.policy.authority, self.protection
            noshow = NoShowTimes.of_seconds(p.noshow_after, p.noshow_release_after)
            # budgets' statements, host groups' own limits and no-show times
            self.fairshare = replace(self.fairshare, authority=authority, noshow=noshow)
            if authority.groups:  # no-shows read a host's group's own times
                self.protection = replace(p, host_group=authority.group_name)
