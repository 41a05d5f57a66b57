"""UNIX accounts: which account on the hosts a gpuhive user is (`GpuHiveApp.unix_users`).

Every place where a gpuhive user becomes a UNIX account asks `unix_account`: a job's tasks
(`runuser -u`, SSH logins, screen sessions, stops, logs), its checkpoint folder and container
home (`{user}`), reservation kernels, the protection's notices and kills, the reports. A user
the site did not map is the account of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping


def unix_account(user_map: Mapping[str, str], user: str) -> str:
    """The UNIX account of gpuhive user `user` (the same name unless the site maps it)."""
    return user_map.get(user, user)


def gpuhive_user(user_map: Mapping[str, str], account: str) -> str:
    """The gpuhive user whose UNIX account `account` is (the inverse of `unix_account`)."""
    names = {mapped: name for name, mapped in user_map.items()}
    return names.get(account, account)
