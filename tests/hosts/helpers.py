"""Helpers for the host pool, probe and sampler tests (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts.pool import SshSettings
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.sim.cluster import LocalSimHost, SshdCluster
from jupyter_gpuhive.sim.inventory import CONFIG_ENV, HOST_ENV

# The shared cluster: two plain hosts, a MIG host and an old host with N/A / Not Supported fields.
# Simulated GPU processes are found machine-wide by host name, so the names are unique to this
# test run: other runs' (or other sessions') processes on a "gpu1" never show up here.
_RUN = uuid.uuid4().hex[:6]
G1, G2, MIG, OLD = (f"hv{_RUN}-{n}" for n in ("gpu1", "gpu2", "mig1", "old1"))
HIVE_HOSTS = (G1, G2, MIG, OLD)


def needs_sshd() -> None:
    if shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")


def host_decls(
    cluster: SshdCluster, names: Sequence[str] | None = None, user: str = "root"
) -> list[HostDecl]:
    """HostDecls for (some of) a cluster's hosts, logging in as `user`."""
    chosen = names or [h.name for h in cluster]
    return [HostDecl(n, cluster[n].address, cluster[n].port, user) for n in chosen]


def settings_for(cluster: SshdCluster, **overrides: Any) -> SshSettings:
    """Pool settings that trust the cluster's host keys and use its client key; quick backoff."""
    base: dict[str, Any] = {
        "client_keys": [str(cluster.client_key)],
        "known_hosts": [str(cluster.known_hosts)],
        "connect_timeout": 5.0,
        "command_timeout": 10.0,
        "backoff_initial": 0.2,
        "backoff_max": 0.5,
    }
    base.update(overrides)
    return SshSettings(**base)


def local_decl(host: LocalSimHost, user: str | None = None) -> HostDecl:
    """A `local` transport declaration for a LocalSimHost."""
    env = host.env()
    keep = {k: env[k] for k in ("PATH", HOST_ENV, CONFIG_ENV)}
    return HostDecl(host.name, "localhost", 22, user, transport="local", extra={"env": keep})


def accepted_logins(cluster: SshdCluster, name: str) -> int:
    """How many SSH logins a host's sshd has accepted (its log says so once per connection)."""
    path = Path(cluster[name].log_path)
    text = path.read_text(errors="replace") if path.exists() else ""
    return text.count("Accepted publickey")


@dataclass
class ChannelLog:
    """SSH session channels opened by asyncssh client connections, per server port."""

    sessions: Counter[int] = field(default_factory=Counter)
    commands: dict[int, list[str]] = field(default_factory=dict)
    in_flight: Counter[int] = field(default_factory=Counter)
    peak: Counter[int] = field(default_factory=Counter)


def sim_processes(config_path: str | Path) -> list[int]:
    """Pids of living (not zombie) processes started for a simulated host's config file."""
    marker = f"GPUHIVE_SIM_CONFIG={config_path}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker not in (entry / "environ").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def kill_sim_processes(config_path: str | Path) -> list[int]:
    """SIGKILL what `sim_processes` finds (probes a test left hanging); return their pids."""
    pids = sim_processes(config_path)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def ps_line(pid: int, pgid: int, user: str, command: str, uid: int = 1000) -> str:
    """A `ps` line as the probe frames it: PID, process group, uid, user, hex command line."""
    return f"{pid} {pgid} {uid} {user} x{command.encode().hex()}"


def intruders(sample: Any, host: str, gpu: tuple[int, str], holder: str) -> list[tuple[Any, ...]]:
    """(kind, offender, pids) of what protection finds in `sample` while `holder` has GPU
    `gpu` (index, UUID) of `host` booked for the hour around now."""
    from datetime import timedelta

    from jupyter_gpuhive.model import Gpu, Reservation, utcnow
    from jupyter_gpuhive.protection.violations import DetectionPolicy, detect

    now = utcnow()
    booked = Gpu(2, host, gpu[0], gpu[1], None, None)
    held = Reservation(
        1, holder, "t", "", now - timedelta(hours=1), now + timedelta(hours=1), (booked,), now
    )
    return [(v.kind, v.offender, v.pids) for v in detect([sample], [held], now,
                                                         DetectionPolicy.build(1))]  # fmt: skip
