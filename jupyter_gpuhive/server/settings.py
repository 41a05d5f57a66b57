"""GpuHiveSettings: gpuhive's settings and the HiveSettings they make, without a server.

Light to import (traitlets and the configuration traits): the CLI reads its settings through
it and starts in a fraction of a second; what a Hive needs (the store, SSH, the services) is
imported only when `settings_for_hive` or the hosts file's watcher runs.
"""

from __future__ import annotations

import asyncio
import functools
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from jupyter_core.paths import jupyter_data_dir

from ..errors import Invalid
from ..files import append_file
from ..hosts.config import local_gpu_host, parse_hosts
from ..hosts.file import default_hosts_file, read_hosts
from ..model import parse_duration
from ..model.approvals import parse_approvals
from ..model.authority import Authority, parse_host_groups
from .config import GpuHiveConfig

if TYPE_CHECKING:
    from ..hive import Hive, HiveSettings
    from ..hosts.file import HostsFileWatcher
    from .api.admission import Intake


class GpuHiveSettings(GpuHiveConfig):
    """gpuhive's settings (`c.GpuHiveApp.…`) and the HiveSettings they make, without a server."""

    def resolved_db_url(self) -> str:
        if self.db_url:
            return self.db_url
        path = Path(jupyter_data_dir()) / "gpuhive" / "gpuhive.sqlite"
        return f"sqlite:///{path}"

    def hosts_file_path(self) -> Path:
        """The hosts file: `hosts_file`, else gpuhive_hosts.toml in the Jupyter config dir."""
        return Path(self.hosts_file).expanduser() if self.hosts_file else default_hosts_file()

    def all_host_specs(self) -> list[dict[str, Any]]:
        """Configured hosts and the hosts file's; with none, this machine if it has GPUs."""
        path = self.hosts_file_path()
        if self.hosts_file and not path.exists():
            self.log.warning("gpuhive: the hosts file %s does not exist (yet)", path)
        specs = [*self.hosts, *read_hosts(path)]
        if specs or not self.auto_local_host or self.service_url:
            return specs
        found, why = local_gpu_host()
        if found is None:
            self.log.info("gpuhive: no hosts configured, and not using this machine: %s", why)
            return specs
        self.log.info(
            "gpuhive: no hosts configured; using this machine as host %r (%s). "
            "Turn this off with c.GpuHiveApp.auto_local_host = False.",
            found["name"], why,
        )  # fmt: skip
        return [found]

    def settings_for_hive(self) -> HiveSettings:
        """The Hive's settings from these traits (Invalid or HandlerConfigError: bad ones)."""
        from ..bookings.fairshare import FairShareSettings
        from ..bookings.reservations import Policy
        from ..hive import HiveSettings
        from ..hosts.backends import backend_of
        from ..hosts.ssh import SshSettings, ensure_client_key
        from ..integrations import FeedSettings, IntegrationSettings, WebhookSettings, mail_settings
        from ..jobs.preemption import PreemptionSettings
        from ..kernels.endpolicy import EndSettings
        from ..model.limits import parse_table
        from ..privacy import Privacy
        from ..protection.service import ProtectionSettings
        from .http_transport import TornadoTransport

        def span(value: str, name: str) -> timedelta:
            return parse_duration(value, name)

        hosts = parse_hosts(self.all_host_specs())
        authority = Authority(  # who administers: the site, and each host group
            frozenset(self.admin_users),
            frozenset(self.admin_groups),
            parse_host_groups(dict(self.host_groups), hosts),
        )
        policy = Policy(
            zone=ZoneInfo(self.site_timezone),
            min_length=span(self.min_reservation, "min_reservation"),
            max_length=span(self.max_reservation, "max_reservation"),
            horizon=span(self.booking_horizon, "booking_horizon"),
            past_grace=span(self.past_grace, "past_grace"),
            authority=authority,
            approvals=parse_approvals(
                dict(self.approvals), span(self.approval_hold, "approval_hold"),
                (h.name for h in hosts), authority.groups,
            ),
        )  # fmt: skip
        keys: list[str] = []
        if any(backend_of(h).uses_ssh_keys for h in hosts):
            ensure_client_key(Path(self.ssh_key).expanduser())
            keys = [str(Path(self.ssh_key).expanduser())]
            for path in self.known_hosts:
                append_file(Path(path).expanduser())  # made if missing, never through a link
        ssh = SshSettings(
            client_keys=keys,
            known_hosts=[str(Path(p).expanduser()) for p in self.known_hosts],
            connect_timeout=self.ssh_connect_timeout,
            command_timeout=self.ssh_command_timeout,
            keepalive_interval=self.ssh_keepalive_interval,
            max_sessions=self.ssh_max_sessions,
        )

        def seconds(value: str, name: str) -> float:
            return parse_duration(value, name).total_seconds() if value else 0.0

        protection = ProtectionSettings(
            level=self.protection_level,
            ladder=list(self.violation_ladder),
            handlers=dict(self.violation_handlers),
            allow_users=frozenset(self.protection_allow_users),
            allow_commands=list(self.protection_allow_commands),
            ghost_mem_mib=self.ghost_memory_mib,
            ghost_util=self.ghost_util,
            over_share_mib=self.over_share_mib,
            idle_after=seconds(self.idle_notify_after, "idle_notify_after"),
            idle_util=self.idle_util,
            idle_end=self.idle_end,
            idle_end_after=seconds(self.idle_end_after, "idle_end_after"),
            idle_handlers=list(self.idle_handlers),
            user_map=dict(self.unix_users),
            container_owner_label=self.container_owner_label or None,
            unattributed_containers=self.unattributed_containers,
            noshow_after=seconds(self.noshow_after, "noshow_after"),
            noshow_release_after=seconds(self.noshow_release_after, "noshow_release_after"),
            noshow_handlers=list(self.noshow_handlers),
            health_handlers=list(self.health_handlers),
        )
        privacy = Privacy(
            public_descriptions=self.public_descriptions,
            public_violations=self.public_violations,
            public_usage=self.public_usage,
        )
        integrations = IntegrationSettings(
            feeds=FeedSettings(
                past=span(self.feed_past, "feed_past"),
                keep_cancelled=span(self.feed_keep_cancelled, "feed_keep_cancelled"),
                ahead=span(self.feed_ahead, "feed_ahead"),
            ),
            webhooks=WebhookSettings(
                timeout=self.webhook_timeout,
                max_attempts=max(1, self.webhook_max_attempts),
                backoff=max(0.0, self.webhook_backoff),
                allowed_hosts=tuple(self.webhook_allowed_hosts),
                allow_private=self.webhook_allow_private,
            ),
            ending_minutes=self.reminder_minutes,
            mail=mail_settings(self.notify_email),
            digest_hour=self.digest_hour,
            zone=ZoneInfo(self.site_timezone),
            tick=max(0.05, self.reminder_interval),
        )
        fairshare = FairShareSettings(
            limits=parse_table(dict(self.limits)),
            score_window=span(self.usage_score_window, "usage_score_window"),
            max_gap=seconds(self.accounting_max_gap, "accounting_max_gap"),
        )
        kernel_end = EndSettings(
            default=self.kernel_end_policy,
            allowed=tuple(self.kernel_end_policies),
            fallback=self.kernel_end_fallback,
            warn_before=timedelta(minutes=self.kernel_warning_minutes),
            extend_by=span(self.kernel_extend_by, "kernel_extend_by"),
            tick=min(5.0, max(0.2, self.poll_interval)),
        )
        for name in ("preempt_grace_s", "max_preemptions", "reclaim_before_start_s"):
            if getattr(self, name) < 0:
                raise Invalid(f"c.GpuHiveApp.{name} must be 0 or more.")
        preemption = PreemptionSettings(
            lending=self.lending,
            grace_s=self.preempt_grace_s,
            max_preemptions=self.max_preemptions,
            least_attained_service=self.least_attained_service,
            reclaim_before_start_s=self.reclaim_before_start_s,
            user_map=dict(protection.user_map),
        )
        return HiveSettings(
            preemption=preemption,
            kernel_end=kernel_end,
            fairshare=fairshare,
            integrations=integrations,
            protection=protection,
            privacy=privacy,
            db_url=self.resolved_db_url(),
            policy=policy,
            http=TornadoTransport,
            hosts=hosts,
            groups=dict(self.groups),
            workers=self.db_workers,
            ssh=ssh,
            poll_interval=self.poll_interval,
            history=self.metrics_history,
            monitor=self.monitor,
            metrics_token=self.metrics_token,
        )

    def intake(self) -> Intake:
        """The bound on requests in flight and their deadline, for one process."""
        from .api.admission import Intake

        return Intake(self.max_requests_in_flight, self.request_deadline)

    def watch_hosts_file(self, hive: Hive) -> HostsFileWatcher | None:
        """What gives `hive` the hosts file's hosts when it changes (None: reload is off)."""
        from ..hosts.file import HostsFileWatcher

        if not self.hosts_file_reload:
            return None
        return HostsFileWatcher(
            self.hosts_file_path(), self.poll_interval, functools.partial(self.reload_hosts, hive)
        )

    async def reload_hosts(self, hive: Hive) -> None:
        """The hosts file changed: `hive` uses its hosts now (a broken file changes nothing)."""
        from ..protection.handlers import HandlerConfigError

        path = self.hosts_file_path()
        try:  # off the loop: it may run the GPU tool (auto_local_host) and make a key
            settings = await asyncio.get_running_loop().run_in_executor(
                None, self.settings_for_hive
            )
        except (Invalid, HandlerConfigError) as error:
            self.log.error("gpuhive: %s changed but is not used: %s", path, error)
            return
        before = {h.name for h in hive.settings.hosts}
        if [(h, h.extra) for h in settings.hosts] == [(h, h.extra) for h in hive.settings.hosts]:
            return
        await hive.use_hosts(settings.hosts, settings.ssh)
        after = {h.name for h in settings.hosts}
        self.log.info(
            "gpuhive: %s changed; hosts now %s (added: %s; removed: %s)", path,
            ", ".join(sorted(after)) or "none", ", ".join(sorted(after - before)) or "none",
            ", ".join(sorted(before - after)) or "none",
        )  # fmt: skip
