"""Directories for kernel sockets that gpuhive makes, checks and removes itself.

Nothing a kernel prints names a directory gpuhive acts on: every directory it will later
lock, connect into or delete is one it made (``mkdtemp``) under a parent of its own, and it
checks owner, type and mode (``O_NOFOLLOW``) again before it acts. No fixed name in a
world-writable directory is used: as root the parent is ``/run/gpuhive`` (only root writes
in /run), otherwise a private directory this process made with ``mkdtemp``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from ..errors import Unavailable

RUN_DIR = Path("/run/gpuhive")
_made: dict[str, Path] = {}  # the runtime directory of this process, once made


class NotOurs(Exception):
    """A directory is not what gpuhive made (owner, type, mode or place)."""


def check_private(path: str | os.PathLike[str], parent: str | None = None) -> os.stat_result:
    """`path` is a real directory (not a symlink) of this process's user that nobody else
    may write, inside `parent` when given; its stat, else NotOurs."""
    text = os.fspath(path)
    if parent is not None and os.path.dirname(text.rstrip("/")) != parent.rstrip("/"):
        raise NotOurs(f"{text} is not inside {parent}")
    try:
        fd = os.open(text, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise NotOurs(f"{text}: {error.strerror}") from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise NotOurs(f"{text} is not a directory of ours that only we may write")
    return info


def own_dir(path: Path, mode: int) -> Path:
    """`path` made (or kept) as our directory with `mode`; Unavailable when it is not ours."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=mode)
    try:
        check_private(path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except (NotOurs, OSError):
        raise Unavailable(
            f"The kernel socket directory {path} is not a directory of the gpuhive server's "
            "own user writable by it alone: set c.GpuHiveApp.kernel_socket_dir to one."
        ) from None
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def runtime_dir() -> Path:
    """gpuhive's own runtime directory: /run/gpuhive as root (0711), else a private one this
    process made with mkdtemp (never a name guessed in /tmp)."""
    if os.geteuid() == 0 and os.path.isdir("/run"):
        with contextlib.suppress(NotOurs):
            check_private("/run")
            return own_dir(RUN_DIR, 0o711)
    made = _made.get("dir")
    if made is None or not made.is_dir():
        made = Path(tempfile.mkdtemp(prefix="gpuhive-run-"))
        os.chmod(made, 0o711)  # noqa: S103 - users pass through to their own sockets only
        _made["dir"] = made
    return made


def kernels_dir() -> Path:
    """Where kernels' socket directories go (mode 0711: users pass through, never list)."""
    return own_dir(runtime_dir() / "kernels", 0o711)


def remove(path: str, parent: str) -> bool:
    """Delete the directory tree `path` that we made inside `parent` (checked first, never
    following a symlink: shutil's fd-based rmtree); False when it was not ours to delete."""
    try:
        check_private(path, parent)
    except NotOurs:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def lock(path: str, parent: str) -> int:
    """Take the directory `path` (ours, made inside `parent`, lent to a kernel's user) back:
    ours again, mode 0711 and no ACL, so its user can no longer add, swap or remove what is
    in it. An open fd of it (the caller closes it), else NotOurs."""
    if os.path.dirname(path.rstrip("/")) != parent.rstrip("/"):
        raise NotOurs(f"{path} is not inside {parent}")
    check_private(parent)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise NotOurs(f"{path}: {error.strerror}") from None
    try:
        os.fchown(fd, os.geteuid(), os.getegid())
        os.fchmod(fd, 0o711)
        for name in ("system.posix_acl_access", "system.posix_acl_default"):
            with contextlib.suppress(OSError):
                os.removexattr(fd, name)
    except OSError:
        os.close(fd)
        raise
    return fd


def sockets_of(fd: int, names: list[str], uid: int) -> list[str]:
    """Which of `names` in the directory `fd` are not Unix sockets of `uid` (symlinks are
    not followed)."""
    wrong = []
    for name in names:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            wrong.append(name)
            continue
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid:
            wrong.append(name)
    return wrong
