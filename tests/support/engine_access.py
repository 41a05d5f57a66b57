"""Letting a test user reach the session's own dockerd, as a site's `docker` group does, and
running its client as that user."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any

from jupyter_gpuhive.sim.cluster import ensure_user

GROUP = "gpuhivedock"  # may use the test dockerd (tests/support/containers.py)


def engine_user(engine: Any, *users: str) -> None:
    """Let `users` use `engine`'s socket (group-owned by GROUP, 0660; its folder 0711)."""
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True, capture_output=True)
    for user in users:
        ensure_user(user)
        subprocess.run(["usermod", "-aG", GROUP, user], check=True, capture_output=True)
    socket = Path(engine.host.removeprefix("unix://"))
    socket.parent.chmod(0o711)
    os.chown(socket, 0, grp.getgrnam(GROUP).gr_gid)
    socket.chmod(0o660)


def as_user(engine: Any, user: str, *args: str) -> str:
    """The engine's client run as `user` (a real UNIX user that `engine_user` let in); its
    standard output."""
    done = subprocess.run(
        ["/usr/sbin/runuser", "-u", user, "--", *engine.argv(*args)],
        capture_output=True, text=True, timeout=60, check=True, cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": pwd.getpwnam(user).pw_dir},
    )  # fmt: skip
    return done.stdout.strip()
