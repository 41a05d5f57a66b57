"""SSH for the host pool: settings, connecting, running one session, keys and host trust.

Failures become sentences for people (`explain`); the pool decides what they mean for a host.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from ..model import HostDecl
from .secretfiles import write_secret
from .status import HostUnavailable

SESSION_RETRIES = 6


@dataclass
class SshSettings:
    """How the pool connects: keys, trust, timeouts, limits, backoff."""

    client_keys: list[str] = field(default_factory=list)
    known_hosts: list[str] = field(default_factory=list)
    connect_timeout: float = 5.0
    command_timeout: float = 15.0
    keepalive_interval: float = 5.0
    keepalive_count_max: int = 3
    max_sessions: int = 8
    backoff_initial: float = 1.0
    backoff_max: float = 60.0


def address(decl: HostDecl) -> str:
    """'address:port' of a host, as reasons name it."""
    return f"{decl.address}:{decl.port}"


def explain(decl: HostDecl, user: str, error: BaseException, timeout: float) -> str:
    """A readable reason for a connection or command failure."""
    where = address(decl)
    if isinstance(error, asyncssh.HostKeyNotVerifiable):
        return (
            f"the host key of {where} is not trusted ({error.reason}). If this is the right "
            f"machine, trust it with `jupyter gpuhive trust {decl.name}`; if you did not "
            "expect a new key, find out why before trusting it."
        )
    if isinstance(error, asyncssh.PermissionDenied):
        return (
            f"{where} refused the key for user {user}: add the line from `jupyter gpuhive key` "
            f"to ~{user}/.ssh/authorized_keys on {decl.name}."
        )
    if isinstance(error, TimeoutError):
        return f"no answer from {where} within {timeout:.0f} s"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused by {where} (is sshd running?)"
    if isinstance(error, asyncssh.ConnectionLost | asyncssh.DisconnectError):
        return f"the connection to {where} was lost: {error.reason or error}"
    if isinstance(error, asyncssh.Error):
        return f"SSH error from {where}: {error.reason or error}"
    if isinstance(error, OSError):
        return f"cannot reach {where}: {error.strerror or error}"
    return f"{type(error).__name__} talking to {where}: {error}"


async def connect(decl: HostDecl, user: str, s: SshSettings) -> asyncssh.SSHClientConnection:
    """A new SSH connection to `decl` as `user`, with `s`'s keys, trust and timeouts."""
    return await asyncssh.connect(
        decl.address,
        port=decl.port,
        username=user,
        client_keys=s.client_keys or None,
        known_hosts=s.known_hosts or (),
        agent_path=None,
        config=[],
        # Send no variable of ours (no SendEnv/SetEnv): a command's environment is the
        # host's login environment, whatever sshd would accept (AcceptEnv).
        env=None,
        send_env=None,
        connect_timeout=s.connect_timeout,
        keepalive_interval=s.keepalive_interval,
        keepalive_count_max=s.keepalive_count_max,
    )


async def run_session(
    conn: asyncssh.SSHClientConnection, command: str, stdin: str | None
) -> asyncssh.SSHCompletedProcess:
    """`conn.run`, waiting out sshd's session limit for a moment.

    sshd frees a session's slot only after the client has seen the channel close, so a new
    session opened at once can be refused ("no more sessions") even below MaxSessions. The
    command never started then, so it is safe to ask again.
    """
    delay = 0.02
    for _ in range(SESSION_RETRIES):
        try:
            return await conn.run(command, check=False, input=stdin)
        except asyncssh.ChannelOpenError:
            if conn.is_closed():
                raise
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 0.5)
    return await conn.run(command, check=False, input=stdin)


def as_text(value: Any) -> str:
    """A command's output as text, whatever asyncssh gave (None, str or bytes)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else bytes(value).decode(errors="replace")


# --- keys and trust ---------------------------------------------------------------------


def ensure_client_key(path: Path) -> asyncssh.SSHKey:
    """Load the hive's SSH key, creating an ed25519 key (0600 from its first byte) on first use."""
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519", comment=f"gpuhive@{os.uname().nodename}")
    if not write_secret(path, key.export_private_key()):  # made meanwhile by another process
        return asyncssh.read_private_key(str(path))
    key.write_public_key(str(path) + ".pub")
    return key


def known_hosts_line(decl: HostDecl, key: asyncssh.SSHKey) -> str:
    """The known_hosts line that trusts `key` for this host."""
    name = decl.address if decl.port == 22 else f"[{decl.address}]:{decl.port}"
    return f"{name} {key.export_public_key('openssh').decode().strip()}"


async def fetch_host_key(decl: HostDecl, timeout: float = 5.0) -> asyncssh.SSHKey:
    """Ask a host for its public host key (to show its fingerprint before trusting it)."""
    async with asyncio.timeout(timeout):
        key = await asyncssh.get_server_host_key(decl.address, decl.port)
    if key is None:
        raise HostUnavailable(decl.name, "the host offered no host key")
    return key
