"""SSH logins as users: whether gpuhive may run jobs as a user on a host, and its public key."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import Conflict
from ..hosts.pool import HostPool, HostUnavailable, SshSettings
from ..model import Identity

CONFIRMED_FOR = 600.0  # seconds a successful login counts before it is tried again


class Logins:
    """Checks (and remembers for a while) that gpuhive can log in as a user's UNIX account
    (`unix_user`: the site's `unix_users`) on its hosts."""

    def __init__(
        self, pool: HostPool, ssh: SshSettings, unix_user: Callable[[str], str] = lambda n: n
    ) -> None:
        self.pool = pool
        self.ssh = ssh
        self.unix_user = unix_user
        self._confirmed: dict[tuple[str, str], float] = {}  # (host, user) → confirmed until

    async def check(self, user: str, hosts: Iterable[str]) -> dict[str, str | None]:
        """Per host: None when gpuhive can log in as `user`'s account there, else the reason."""
        results: dict[str, str | None] = {}
        account = self.unix_user(user)
        for host in sorted(set(hosts)):
            key = (host, account)
            if self._confirmed.get(key, 0.0) > time.monotonic():
                results[host] = None
                continue
            try:
                await self.pool.run(host, "true", user=account, timeout=10)
            except HostUnavailable as error:
                results[host] = error.reason
                continue
            self._confirmed[key] = time.monotonic() + CONFIRMED_FOR
            results[host] = None
        return results

    async def require(self, user: str, hosts: Iterable[str]) -> None:
        """Refuse (409) when gpuhive cannot log in as `user` on one of `hosts`."""
        problems = {h: r for h, r in (await self.check(user, hosts)).items() if r}
        if problems:
            detail = "; ".join(f"{host}: {reason}" for host, reason in problems.items())
            account = self.unix_user(user)
            named = account if account == user else f"{account} ({user}'s UNIX account)"
            raise Conflict(f"gpuhive cannot run jobs as {named} yet. {detail}")

    def public_key(self) -> str | None:
        """The public key users add to authorized_keys (None without SSH hosts)."""
        for path in self.ssh.client_keys:
            try:
                with open(path + ".pub") as handle:
                    return handle.read().strip()
            except OSError:
                continue
        return None

    async def status(self, who: Identity) -> dict[str, Any]:
        """The public key, and per SSH host whether gpuhive can log in as `who` there."""
        hosts = self.pool.hosts.values()
        ssh_hosts = [h.name for h in hosts if self.pool.backend_of(h).uses_ssh_keys]
        return {"public_key": self.public_key(), "hosts": await self.check(who.name, ssh_hosts)}
