"""Files the server and the CLI write, often as root: only where nobody else can change them.

A folder is walked from `/` one name at a time with `O_NOFOLLOW`: each must belong to root or
to this process's account and be writable by nobody else (a sticky folder such as `/tmp` may
be passed through, never written into); a link is followed only when root or this account
made it (its folder is checked already, so nobody else chose where it points). Missing
folders are made 0700. A file is never written through: an existing one must be a plain file
of this account with one name, and is replaced by a new file written under a temporary name
(`O_EXCL | O_NOFOLLOW`). `UnsafePath` says what was refused, why, and how to fix it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import stat
from pathlib import Path

from .errors import Invalid

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # links followed on one path (the kernel's own limit)


class UnsafePath(Invalid):
    """A path someone else could change (a link, a foreign owner, a mode open to others)."""


def account(uid: int) -> str:
    """The name of a uid (the number when it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _check_dir(fd: int, where: Path, last: bool) -> None:
    info = os.fstat(fd)
    if not _trusted(info.st_uid):
        raise UnsafePath(
            f"Refused: {where} belongs to {account(info.st_uid)}, and gpuhive writes only into "
            f"folders of root or {account(os.geteuid())} (choose another folder)."
        )
    open_to_others = info.st_mode & 0o022
    if open_to_others and (last or not info.st_mode & stat.S_ISVTX):
        raise UnsafePath(
            f"Refused: others may write in {where} (mode {stat.S_IMODE(info.st_mode):04o}); "
            "gpuhive writes only where nobody else can (chmod go-w it, or choose another folder)."
        )


def open_dir(path: Path, *, create: bool = False) -> int:
    """A descriptor of the folder `path`, checked all the way from `/` (missing folders made
    0700 when `create`); the caller closes it. UnsafePath when someone else could change it."""
    parts = list(Path(os.path.abspath(path)).parts[1:])
    fd = os.open("/", DIR_FLAGS)
    done, hops = Path("/"), 0
    try:
        _check_dir(fd, done, last=not parts)
        while parts:
            name = parts.pop(0)
            where = done / name
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise UnsafePath(f"{where} does not exist.") from None
                os.mkdir(name, 0o700, dir_fd=fd)
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                if not _trusted(info.st_uid) or hops >= MAX_LINKS:
                    raise UnsafePath(
                        f"Refused: {where} is a link that {account(info.st_uid)} made; gpuhive "
                        "follows no link another account controls (remove it, or name the "
                        "folder it points to)."
                    )
                hops += 1
                target = Path(os.path.normpath(done / os.readlink(name, dir_fd=fd)))
                parts = list(target.parts[1:]) + parts
                os.close(fd)
                fd = os.open("/", DIR_FLAGS)  # the target is checked from the top again
                done = Path("/")
                continue
            if not stat.S_ISDIR(info.st_mode):
                raise UnsafePath(f"Refused: {where} is not a folder.")
            inner = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd, done = inner, where
            _check_dir(fd, done, last=not parts)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_file(fd: int, name: str, where: Path, private: bool = False) -> os.stat_result | None:
    """The status of file `name` in folder `fd`, None when missing; UnsafePath when it is
    not a plain file of this account with one name (and, `private`, open to nobody else)."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return _judge(info, where, private)


def _judge(info: os.stat_result, where: Path, private: bool = False) -> os.stat_result:
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath(
            f"Refused: {where} is a link (made by {account(info.st_uid)}); gpuhive never writes "
            "through one (remove it)."
        )
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        raise UnsafePath(f"Refused: {where} is not a plain file with one name (remove it).")
    if info.st_uid != os.geteuid():
        raise UnsafePath(
            f"Refused: {where} belongs to {account(info.st_uid)}, not {account(os.geteuid())}: "
            "someone else made it first (remove it, or choose another path)."
        )
    if private and info.st_mode & 0o077:
        raise UnsafePath(
            f"Refused: others may open {where} (mode {stat.S_IMODE(info.st_mode):04o}); it "
            "must be 0600 (chmod 600 it if nobody else had it, else remove it)."
        )
    return info


def write_file(path: Path, data: str | bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` at once (`mode`; default the old file's, else 0644)."""
    fd = open_dir(path.parent, create=True)
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        old = _check_file(fd, path.name, path)
        mode = mode if mode is not None else stat.S_IMODE(old.st_mode) if old else 0o644
        out = os.open(tmp, NEW_FILE, 0o600, dir_fd=fd)
        try:
            os.fchmod(out, mode)
            view = memoryview(data.encode() if isinstance(data, str) else data)
            while view:
                view = view[os.write(out, view) :]
            os.fsync(out)
        finally:
            os.close(out)
        os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=fd)
        os.close(fd)


def append_file(path: Path, text: str = "", mode: int = 0o644) -> None:
    """Append `text` to `path` (made with `mode` when missing; "" only makes sure it exists)."""
    fd = open_dir(path.parent, create=True)
    try:
        _check_file(fd, path.name, path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(path.name, flags, mode, dir_fd=fd)
        try:
            _judge(os.fstat(out), path)  # the file opened, whatever happened to the name
            os.write(out, text.encode())
        finally:
            os.close(out)
    finally:
        os.close(fd)


def private_file(path: Path) -> bool:
    """Make `path` an empty 0600 file of this account, or check the one there (UnsafePath when
    it is a link, someone else's, or open to others); whether it was made now."""
    fd = open_dir(path.parent, create=True)
    try:
        if _check_file(fd, path.name, path, private=True) is not None:
            return False
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path.name, NEW_FILE, 0o600, dir_fd=fd))
            return True
        _check_file(fd, path.name, path, private=True)  # made by someone else meanwhile
        return False
    finally:
        os.close(fd)
