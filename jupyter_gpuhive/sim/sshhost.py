"""One sshd-backed simulated host: where it listens, its files, and how a client logs in."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_host_name(name: str) -> str:
    """Return `name` if it can name a simulated host (it reaches configs and shells)."""
    if not _HOST_NAME.match(name):
        raise ValueError(f"not a usable simulated host name: {name!r}")
    return name


@dataclass
class SimHost:
    """One sshd-backed simulated host, and what a client needs to log in to it."""

    name: str
    address: str
    port: int
    dir: Path
    config_path: Path
    client_key: Path
    known_hosts: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def sim_host(self) -> str:
        """The GPUHIVE_SIM_HOST value processes on this host carry."""
        return self.name

    @property
    def host_key(self) -> Path:
        """The host's private ed25519 key."""
        return self.dir / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        """This host's sshd configuration file."""
        return self.dir / "sshd_config"

    @property
    def log_path(self) -> Path:
        """The sshd log (``-E``)."""
        return self.dir / "sshd.log"

    @property
    def pid_file(self) -> Path:
        """The sshd pid file."""
        return self.dir / "sshd.pid"

    @property
    def running(self) -> bool:
        """Whether its sshd listener is alive."""
        return self.process is not None and self.process.poll() is None

    def ssh_command(
        self, user: str, command: str | Sequence[str] = (), *, strict: bool = True
    ) -> list[str]:
        """An ``ssh`` argv running `command` as `user` (an argv is quoted for the remote shell)."""
        remote = command if isinstance(command, str) else shlex.join(command)
        argv = [
            "ssh",
            "-i",
            str(self.client_key),
            "-p",
            str(self.port),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "LogLevel=ERROR",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            f"StrictHostKeyChecking={'yes' if strict else 'no'}",
            f"{user}@{self.address}",
        ]
        return [*argv, remote] if remote else argv

    def asyncssh_options(self, user: str) -> dict[str, Any]:
        """Keyword arguments for ``asyncssh.connect`` as `user`, host key verified."""
        return {
            "host": self.address,
            "port": self.port,
            "username": user,
            "client_keys": [str(self.client_key)],
            "known_hosts": str(self.known_hosts),
            "agent_path": None,
        }
