"""The explicit environment of every command gpuhive runs as a user on the `local` transport.

Nothing of the server's own environment reaches a user's command: not its token, not a
database password, not whatever the service manager put there. A command gets a fixed base
(PATH, the user's HOME/USER/LOGNAME/SHELL, LANG, TZ) plus the host's configured `env`.
Over SSH the host's sshd builds the login environment itself (asyncssh sends no variables
unless asked, and the pool never asks).
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping
from typing import Any

from ..model import HostDecl

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a task keeps of its session's environment when it starts from an empty one (`env -i`).
BASE_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ")
_LOCALE = re.compile(r"[A-Za-z0-9_.@-]{1,64}\Z")
_ZONE = re.compile(r":?[A-Za-z0-9_+/.-]{1,128}\Z")


def host_env(decl: HostDecl) -> dict[str, str]:
    """The host's configured `env` (HostDecl.extra['env']), values as strings."""
    env: Any = decl.extra.get("env") or {}
    if not isinstance(env, Mapping):
        return {}
    return {str(name): str(value) for name, value in env.items()}


def base_env(user: str, server: Mapping[str, str] | None = None) -> dict[str, str]:
    """PATH, the account of `user` from the password database, and the server's locale/zone.

    Only the server's LANG, LC_ALL and TZ are read, and only when they look like a locale
    or a zone name; everything else is fixed.
    """
    server = os.environ if server is None else server
    env = {"PATH": SAFE_PATH, "USER": user, "LOGNAME": user}
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        pass
    else:
        env["HOME"] = account.pw_dir
        env["SHELL"] = account.pw_shell or "/bin/sh"
    lang = server.get("LANG", "")
    env["LANG"] = lang if _LOCALE.match(lang) else "C.UTF-8"
    if _LOCALE.match(server.get("LC_ALL", "")):
        env["LC_ALL"] = server["LC_ALL"]
    if _ZONE.match(server.get("TZ", "")):
        env["TZ"] = server["TZ"]
    return env


def command_env(decl: HostDecl, user: str) -> dict[str, str]:
    """The whole environment of a local command run as `user`: the base, then the host's env."""
    return {**base_env(user), **host_env(decl)}
