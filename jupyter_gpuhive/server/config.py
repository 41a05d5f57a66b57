"""GpuHiveConfig: every `c.GpuHiveApp.…` setting, with its help, default and validation.

The extension (`app.GpuHiveApp`) and the team service (`hub`) carry these traits through
`app.GpuHiveSettings`, which turns them into the Hive's settings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Float, Int, List, Set, TraitError, Unicode, default, validate

from ..errors import Invalid
from ..model import parse_duration
from .tenancy import TenancyConfig


def system_timezone() -> str:
    """The machine's IANA time zone name, or 'UTC' when it cannot be told."""
    if os.environ.get("TZ"):
        return os.environ["TZ"].lstrip(":")
    try:
        return Path("/etc/timezone").read_text().strip() or "UTC"
    except OSError:
        pass
    target = os.path.realpath("/etc/localtime")
    return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else "UTC"


class GpuHiveConfig(TenancyConfig):
    """gpuhive's configuration traits (`c.GpuHiveApp.…`), without a server."""

    @classmethod
    def section_names(cls) -> list[str]:
        """`c.GpuHiveApp.…` also where no GpuHiveApp runs (the team service)."""
        names: list[str] = super().section_names()
        return names if "GpuHiveApp" in names else [*names, "GpuHiveApp"]

    db_url = Unicode(
        "",
        help="SQLAlchemy URL of the store. Empty: SQLite under the Jupyter data directory. "
        "Team mode: postgresql+psycopg://user:password@host/dbname.",
    ).tag(config=True)

    hosts = List(
        Dict(),
        help="GPU hosts: [{'name': 'gpu1', 'address': 'gpu1.lab', 'user': 'hive', 'transport': "
        "'ssh'|'local'|'slurm', 'gpus': [{'index': 0, 'uuid': 'GPU-…', 'memory_mib': 40960}] "
        "or 'gpu_count': 4}]; more keys in the how-to guides. GPUs may also be discovered later.",
    ).tag(config=True)

    hosts_file = Unicode(
        "",
        help="A JSON or TOML file with more hosts (a list, or a table with a 'hosts' list). "
        "Default: gpuhive_hosts.toml in the Jupyter config dir, read when it exists; "
        "`jupyter gpuhive hosts add|remove` edit it.",
    ).tag(config=True)
    hosts_file_reload = Bool(
        True,
        help="Re-read the hosts file when it changes (checked every poll_interval), so "
        "`jupyter gpuhive hosts add|remove` take effect without a restart.",
    ).tag(config=True)
    sidebar_note = Unicode(
        "",
        help="A note shown at the top of the JupyterLab sidebar panel (GET hosts: 'note'), "
        "e.g. what a demo or a site's machines are for.",
    ).tag(config=True)
    auto_local_host = Bool(
        True,
        help="With no hosts configured, use this machine as the GPU host when its GPU tool "
        "runs here (local transport, named by its host name). False turns this off.",
    ).tag(config=True)

    site_timezone = Unicode(
        help="IANA time zone of the weekly windows in access rules (default: the system's)."
    ).tag(config=True)

    admin_users = Set(Unicode(), help="User names with admin rights in gpuhive.").tag(config=True)
    admin_groups = Set(Unicode(), help="Groups whose members are gpuhive admins.").tag(config=True)
    groups = Dict(
        key_trait=Unicode(),
        value_trait=List(Unicode()),
        help="Groups defined here (for servers without JupyterHub): {'phd': ['alice', 'bob']}.",
    ).tag(config=True)
    host_groups = Dict(
        help="Host groups, {'physics': {'admins': [users], 'admin_groups': [groups]}}; a host "
        "joins one by its 'group' key; its admins run its hosts (docs/how-to/authorization.md).",
    ).tag(config=True)

    min_reservation = Unicode("5m", help="Shortest reservation, e.g. '15m'.").tag(config=True)
    max_reservation = Unicode("7d", help="Longest reservation, e.g. '3d'.").tag(config=True)
    booking_horizon = Unicode("90d", help="How far ahead reservations may start.").tag(config=True)
    past_grace = Unicode(
        "5m", help="How far in the past a new reservation may start (clock skew, slow forms)."
    ).tag(config=True)
    db_workers = Int(8, help="Threads that run database work off the event loop.").tag(config=True)
    max_requests_in_flight = Int(
        64,
        help="API requests one process serves at once; beyond them a request is refused at "
        "once (503 with Retry-After: 1), before its token is checked or any database work. "
        "Metrics scrapes (GET prometheus) and the service's health checks are not counted. "
        "0: no bound.",
    ).tag(config=True)
    request_deadline = Float(
        20.0,
        help="Seconds an API request may wait before its database work starts: work not "
        "started by then, or after the client closed its connection, is not started (503), "
        "so nothing is changed for a client that gave up. Keep it below clients' timeouts "
        "(HiveClient: 30 s).",
    ).tag(config=True)

    poll_interval = Float(5.0, help="Seconds between two sweeps over all hosts.").tag(config=True)
    lending = Bool(
        True,
        help="Let preemptible queued jobs run on reserved GPUs while their holder has no process "
        "on them; the holder's start takes them back (see the how-to on preemptible jobs). A "
        "booking may opt out ('lend': false).",
    ).tag(config=True)
    preempt_grace_s = Int(
        30,
        help="Seconds a preemptible job has, after its signal, to checkpoint before it is "
        "stopped (SIGTERM, then SIGKILL); a job may ask for less, not more.",
    ).tag(config=True)
    max_preemptions = Int(
        3,
        help="Preemptions after which a job no longer borrows GPUs: it is told and waits for "
        "GPUs nobody booked.",
    ).tag(config=True)
    least_attained_service = Bool(
        True,
        help="Let a new queued job that cannot start preempt running preemptible jobs that "
        "have had at least 1 GPU-hour (on one host; never a GPU a booking or another waiting "
        "job's kept slot needs before it ends): each gets its signal and grace, and goes back "
        "to the queue behind new jobs by the service it has had. A job is preempted at most "
        "max_preemptions times (the counter lending uses). False: only lending preempts.",
    ).tag(config=True)
    reclaim_before_start_s = Int(
        300,
        help="Seconds before its start at which a booking that chose 'reclaim_before_start' "
        "takes lent GPUs back.",
    ).tag(config=True)
    metrics_token = Unicode(
        "",
        help="Bearer token a Prometheus scrape of GET {base_url}gpuhive/api/prometheus sends "
        "(scrape_configs: authorization: credentials: TOKEN). Empty: only gpuhive admins (their "
        "Jupyter or Hub token) may scrape; the endpoint is never open. A long random string, "
        "e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`.",
    ).tag(config=True)
    metrics_history = Int(
        720, help="Samples kept in memory per GPU and host (720 × 5 s = 1 hour)."
    ).tag(config=True)
    monitor = Bool(True, help="Sweep the hosts (turn off for a reservations-only server).").tag(
        config=True
    )
    ssh_key = Unicode(
        help="Private key gpuhive logs in with (created on first use; "
        "`jupyter gpuhive key` prints the public half)."
    ).tag(config=True)
    known_hosts = List(
        Unicode(),
        help="known_hosts files with the trusted host keys (`jupyter gpuhive trust HOST`).",
    ).tag(config=True)
    ssh_connect_timeout = Float(5.0, help="Seconds to establish an SSH connection.").tag(
        config=True
    )
    ssh_command_timeout = Float(15.0, help="Default seconds a remote command may take.").tag(
        config=True
    )
    ssh_max_sessions = Int(
        8, help="Concurrent commands per host (sshd allows 10 sessions per connection)."
    ).tag(config=True)
    ssh_keepalive_interval = Float(
        5.0, help="Seconds between SSH keepalives; 3 unanswered ones mark a host down."
    ).tag(config=True)

    protection_level = Int(
        1,
        help="0: off; 1: act on processes on GPUs reserved by someone else; "
        "2: also on GPUs nobody reserved.",
    ).tag(config=True)
    violation_handlers = Dict(
        help="Violation handlers by name with their options, e.g. {'email': {'host': "
        "'smtp.lab', 'port': 587, 'starttls': True, 'username': 'hive', 'password': '…', "
        "'sender': 'gpuhive@lab', 'address_template': '{user}@lab.org', 'admins': "
        "['it@lab.org']}, 'kill': {'mode': 'user'}, 'webhook': {'url': 'https://…'}}. "
        "'type' picks the handler type (default: the name). Every handler takes 'interval' "
        "(rate limit, s), 'timeout', 'message' (template with {gpu} {host} {holder} {end} "
        "{title} {pids} {user}) and 'kinds'. kill: 'mode' user|sudo, 'signal', 'grace'. More "
        "types come from the entry point group jupyter_gpuhive.violation_handlers.",
    ).tag(config=True)
    violation_ladder = List(
        Dict(),
        default_value=[{"after": 0, "handler": "terminal"}, {"after": 0, "handler": "event"}],
        help="Escalation ladder: steps {'after': seconds since the violation began, "
        "'handler': name, plus step options such as 'signal', 'grace', 'message'}, e.g. "
        "terminal at 0, email at 60, kill INT at 300, kill KILL at 360.",
    ).tag(config=True)
    protection_allow_users = Set(
        Unicode(), help="UNIX users whose GPU processes are never violations (e.g. 'root')."
    ).tag(config=True)
    container_owner_label = Unicode(
        "",
        help="A container label (e.g. 'gpuhive.owner') that names the gpuhive user who answers "
        "for a rootful container gpuhive did not start. Anyone who may run containers sets any "
        "label: trust one only where users cannot start containers themselves (gpuhive's own "
        "containers are known from the job table, rootless Podman ones by their uid). Empty: "
        "no label is trusted.",
    ).tag(config=True)
    unattributed_containers = Unicode(
        "violation",
        help="A GPU process in a rootful container with no known owner: 'violation' (judged as "
        "the engine's owner, root, never the uid the container picked; the kill step removes "
        "the container) or 'exempt' (never a violation).",
    ).tag(config=True)
    protection_allow_commands = List(
        Unicode(),
        default_value=[r"(^|/)Xorg( |$)", r"(^|/)gnome-shell( |$)"],
        help="Regular expressions; GPU processes whose command matches are never violations.",
    ).tag(config=True)
    ghost_memory_mib = Int(
        1024, help="Flag a GPU using this much memory with no process listed (0: off)."
    ).tag(config=True)
    over_share_mib = Int(
        512,
        help="On a shared GPU, how much more memory (MiB) than the share a holder's processes "
        "may use before it is an over-share violation (CUDA contexts, allocator rounding).",
    ).tag(config=True)
    ghost_util = Int(10, help="Flag a GPU this busy (%) with no process listed (0: off).").tag(
        config=True
    )
    idle_notify_after = Unicode(
        "",
        help="Tell holders when all GPUs of their running reservation were idle this long, "
        "e.g. '30m' ('' = off).",
    ).tag(config=True)
    idle_util = Float(5.0, help="Utilization (%) below which a GPU with no process is idle.").tag(
        config=True
    )
    idle_end = Bool(
        False, help="End idle reservations early (after idle_notify_after + idle_end_after)."
    ).tag(config=True)
    idle_end_after = Unicode(
        "30m", help="Further grace after the idle notice before the reservation is ended."
    ).tag(config=True)
    idle_handlers = List(
        Unicode(),
        default_value=["event"],
        help="Handlers that tell holders about idle reservations (e.g. ['event', 'email']).",
    ).tag(config=True)
    unix_users = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        help="gpuhive user → UNIX user, where they differ (process owners are UNIX users).",
    ).tag(config=True)
    noshow_after = Unicode(
        "",
        help="A running reservation on whose GPUs no process of its owner (theirs, their "
        "jobs', their kernels') appeared this long after its start is a no-show: its owner is "
        "told (noshow_handlers), e.g. '15m' ('' = off).",
    ).tag(config=True)
    noshow_release_after = Unicode(
        "30m",
        help="Further grace after the no-show notice before the reservation is released "
        "(its end moves to now; the reservation and the notice stay in the history).",
    ).tag(config=True)
    noshow_handlers = List(
        Unicode(),
        default_value=["event"],
        help="Handlers that tell owners about no-shows (e.g. ['event', 'email', 'terminal']).",
    ).tag(config=True)
    health_handlers = List(
        Unicode(),
        default_value=["event"],
        help="Handlers that tell the holders of a GPU that failed its health check or was "
        "drained, with the finder's best alternative (e.g. ['event', 'email']; [] = only the "
        "gpu.health webhook event).",
    ).tag(config=True)

    limits = Dict(
        help="Fair-share limits: {'default': {...}, 'groups': {'phd': {...}}, 'users': "
        "{'alice': {...}}, 'tiers': [...]}, each {...} any of 'gpus' (GPUs held at once), "
        "'gpu_hours_week' (GPU-hours in any rolling 7 days), 'upcoming' (reservations not yet "
        "ended), 'longest' and 'horizon' (durations such as '2d'). The user's value wins over "
        "the most generous of their groups', which wins over the default. Tiers scale a limit "
        "by efficiency: {'efficiency_below': 30, 'limit': 'gpu_hours_week', 'factor': 0.5}. "
        "Admins may change them (PUT limits); stored values win over these.",
    ).tag(config=True)
    usage_score_window = Unicode(
        "30d", help="The window of usage scores (GET usage/scores) and of efficiency tiers."
    ).tag(config=True)
    accounting_max_gap = Unicode(
        "",
        help="The longest time between two samples of a GPU that is charged (time, use and "
        "energy); longer gaps are not charged at all. Default: 3 sweeps, at least 1 minute.",
    ).tag(config=True)

    public_descriptions = Bool(
        False,
        help="Show the descriptions of reservations and jobs to every user. Default: only "
        "to their owner and admins (titles, names and owners are always shown to all).",
    ).tag(config=True)
    public_violations = Bool(
        False,
        help="List every violation to every user. Default: a user sees only those where they "
        "hold the reserved GPU or are the offender. PIDs, command lines and handler details "
        "stay visible to those involved and admins either way.",
    ).tag(config=True)
    public_usage = Bool(
        False,
        help="Show everyone's usage per user and per reservation to every user. Default: a "
        "user sees their own rows and, of others, totals per GPU and for the site.",
    ).tag(config=True)

    service_url = Unicode(
        "",
        help="Client mode (JupyterHub team deployments): URL of the gpuhive service, e.g. "
        "'http://127.0.0.1:10101/services/gpuhive/'. Set, this server keeps no store and "
        "forwards every gpuhive API call to the service with its user's Hub token.",
    ).tag(config=True)

    feed_keep_cancelled = Unicode(
        "30d",
        help="How long a cancelled reservation stays in calendar feeds (STATUS:CANCELLED), "
        "so that subscribed calendars remove it.",
    ).tag(config=True)
    feed_past = Unicode("30d", help="How far back calendar feeds reach.").tag(config=True)
    feed_ahead = Unicode("120d", help="How far ahead calendar feeds reach.").tag(config=True)
    webhook_timeout = Float(
        10.0, help="Seconds one webhook delivery attempt may take (connect and answer)."
    ).tag(config=True)
    webhook_max_attempts = Int(
        6, help="Attempts per webhook delivery before it is dead (kept in the delivery log)."
    ).tag(config=True)
    webhook_backoff = Float(
        5.0,
        help="Seconds before the first webhook retry; each later one waits twice as long "
        "(at most 15 minutes), with ±50% jitter.",
    ).tag(config=True)
    webhook_allowed_hosts = List(
        Unicode(),
        ["*"],
        help="Host names webhook URLs may point at (shell patterns, e.g. 'hooks.slack.com', "
        "'*.example.org'). Default: any.",
    ).tag(config=True)
    webhook_allow_private = Bool(
        False,
        help="Let users' own webhooks point at loopback, private and link-local addresses "
        "(this machine, the lab network, cloud metadata). Off: only site webhooks, which only "
        "admins add, may.",
    ).tag(config=True)
    reminder_minutes = Int(
        15, help="The 'reservation.ending' webhook event comes this many minutes before the end."
    ).tag(config=True)
    reminder_interval = Float(
        30.0,
        help="Seconds between checks for reservations starting or ending soon, and for "
        "availability subscriptions whose GPUs became free.",
    ).tag(config=True)
    notify_email = Dict(
        help="SMTP for every e-mail gpuhive sends (availability notices, daily digests, the "
        "violation handler 'email'): {'host': 'smtp.lab', 'port': 587, 'starttls': True, "
        "'username': …, 'password': …, 'sender': 'gpuhive@lab', 'address_template': "
        "'{user}@lab.org', 'addresses': {'alice': 'a@x.org'}, 'timeout': 20, 'verify': True}. "
        "An 'email' handler's own SMTP options win over these for that handler. "
        "Empty: no e-mail.",
    ).tag(config=True)
    digest_hour = Int(
        7,
        help="Local hour (site time zone) from which the daily digest e-mails go out to the "
        "users who turned them on (PUT digest).",
    ).tag(config=True)

    kernel_specs = Bool(
        True,
        help="Offer a kernelspec 'Python on my reservation …' for each active or upcoming "
        "reservation of the user (launcher and kernel picker); its kernel runs on the "
        "reservation's host and GPUs.",
    ).tag(config=True)
    kernel_socket_dir = Unicode(
        "",
        help="Team-mode service: the directory under which it makes each brokered kernel's "
        "private socket directory (mode 0700, owned by the kernel's user). It must belong to "
        "the service's user and be writable by it alone. Empty: /run/gpuhive/kernels when "
        "the service runs as root, else a private directory it makes (mkdtemp) when it starts.",
    ).tag(config=True)
    kernel_lease = Float(
        90.0,
        help="Team-mode service: seconds a brokered kernel lives on without its user's server "
        "asking about it (a server polls every few seconds while it runs); then the service "
        "shuts it down, as after a crash of that server.",
    ).tag(config=True)
    kernel_warning_minutes = Float(
        10.0,
        help="Minutes before a reservation ends when its kernels' notebooks are warned (a Lab "
        "notification, and a line in the running cell when the kernel is busy).",
    ).tag(config=True)
    kernel_end_policy = Unicode(
        "shutdown",
        help="What happens to a kernel when its reservation ends, unless its owner picks "
        "another allowed policy: 'warn' (keep running), 'interrupt', 'shutdown', or 'extend' "
        "(extend the reservation when its GPUs are free next, else kernel_end_fallback).",
    ).tag(config=True)
    kernel_end_policies = List(
        Unicode(),
        default_value=["warn", "interrupt", "shutdown", "extend"],
        help="The end policies users may choose for their kernels.",
    ).tag(config=True)
    kernel_end_fallback = Unicode(
        "shutdown",
        help="The default policy when 'extend' finds the next slot taken (a user may choose "
        "another allowed one).",
    ).tag(config=True)
    kernel_extend_by = Unicode(
        "30m", help="How much longer the 'extend' end policy makes a reservation each time."
    ).tag(config=True)

    @default("ssh_key")
    def _default_key(self) -> str:
        return str(Path(jupyter_data_dir()) / "gpuhive" / "ssh" / "id_ed25519")

    @default("known_hosts")
    def _default_known_hosts(self) -> list[str]:
        return [str(Path(jupyter_data_dir()) / "gpuhive" / "ssh" / "known_hosts")]

    @default("site_timezone")
    def _default_zone(self) -> str:
        return system_timezone()

    @validate("site_timezone")
    def _check_zone(self, proposal: dict[str, Any]) -> str:
        try:
            ZoneInfo(proposal["value"])
        except (ZoneInfoNotFoundError, ValueError):
            raise TraitError(f"Unknown time zone {proposal['value']!r}") from None
        return str(proposal["value"])

    @validate(
        "min_reservation", "max_reservation", "booking_horizon", "past_grace",
        "feed_keep_cancelled", "feed_past", "feed_ahead", "kernel_extend_by",
    )  # fmt: skip
    def _check_duration(self, proposal: dict[str, Any]) -> str:
        try:
            parse_duration(proposal["value"], proposal["trait"].name)
        except Invalid as error:
            raise TraitError(error.message) from None
        return str(proposal["value"])
