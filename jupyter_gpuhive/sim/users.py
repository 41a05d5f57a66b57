"""Real UNIX test users, and real processes that sit on simulated GPUs as those users."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from collections.abc import Mapping, Sequence

from .inventory import CONFIG_ENV, HOST_ENV, MEM_ENV, UTIL_ENV

_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,30}$")
USERADD_EXISTS = 9  # useradd's status when the user appeared meanwhile


def is_root() -> bool:
    """Whether this process may create users and act as any of them."""
    return os.geteuid() == 0


def current_user() -> str:
    """The UNIX name of this process's user."""
    return pwd.getpwuid(os.geteuid()).pw_name


def ensure_user(name: str) -> pwd.struct_passwd:
    """Return a UNIX user, creating it (home, bash, key login allowed) when missing.

    A new user's password is set to '*': with ``UsePAM no`` sshd refuses even key logins for
    accounts that useradd leaves locked ('!'). Existing users are never changed. Needs root.
    """
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if not _USER_NAME.match(name):
        raise ValueError(f"not a portable UNIX user name: {name!r}")
    if not is_root():
        raise PermissionError(f"creating the UNIX user {name!r} needs root")
    made = subprocess.run(
        ["useradd", "-m", "-s", "/bin/bash", name], capture_output=True, text=True, check=False
    )
    if made.returncode not in (0, USERADD_EXISTS):
        raise RuntimeError(f"useradd {name} failed: {made.stderr.strip()}")
    if made.returncode == 0:
        subprocess.run(["usermod", "-p", "*", name], capture_output=True, check=True)
    return pwd.getpwnam(name)


def gpu_env(
    host: str,
    gpus: Sequence[int | str],
    *,
    mem_mib: int | None = None,
    util: int | None = None,
    variable: str = "CUDA_VISIBLE_DEVICES",
) -> dict[str, str]:
    """The environment variables that put a process on simulated GPUs of `host` (`variable`:
    the vendor's pinning variable, e.g. ROCR_VISIBLE_DEVICES on an AMD host)."""
    env = {HOST_ENV: host, variable: ",".join(str(g) for g in gpus)}
    if mem_mib is not None:
        env[MEM_ENV] = str(mem_mib)
    if util is not None:
        env[UTIL_ENV] = str(util)
    return env


def start_gpu_process(
    host: str,
    gpus: Sequence[int | str],
    *,
    user: str | None = None,
    command: Sequence[str | bytes] = ("sleep", "600"),
    mem_mib: int | None = None,
    util: int | None = None,
    env: Mapping[str, str] | None = None,
    config: str | os.PathLike[str] | None = None,
    variable: str = "CUDA_VISIBLE_DEVICES",
) -> subprocess.Popen[bytes]:
    """Start a real process as `user` that the stand-in reports on `gpus` of `host`.

    With `config` (the host's sim config file) only that simulated host reports it.

    `gpus` are indices or UUIDs (as in CUDA_VISIBLE_DEVICES). The process is started directly
    with the user's uid/gids (no su/runuser in between), so the Popen's pid is the GPU process
    itself: ``ps -o user= -p PID`` shows `user` and ``kill PID`` ends it. Other users need root.
    """
    account = pwd.getpwnam(user) if user else pwd.getpwuid(os.geteuid())
    full_env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": account.pw_dir,
        "USER": account.pw_name,
        "LOGNAME": account.pw_name,
        "SHELL": account.pw_shell or "/bin/sh",
        **(env or {}),
        **gpu_env(host, gpus, mem_mib=mem_mib, util=util, variable=variable),
        **({CONFIG_ENV: str(config)} if config else {}),
    }
    as_other = account.pw_uid != os.geteuid()
    if as_other and not is_root():
        raise PermissionError(f"starting a process as {account.pw_name!r} needs root")
    return subprocess.Popen(
        list(command),
        env=full_env,
        cwd=account.pw_dir if os.path.isdir(account.pw_dir) else "/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        user=account.pw_uid if as_other else None,
        group=account.pw_gid if as_other else None,
        extra_groups=os.getgrouplist(account.pw_name, account.pw_gid) if as_other else None,
    )
