"""Files that hold secrets (keys, configs with passwords): owner-only from their first byte.

A file written under the umask and then chmod'ed is readable by others for a moment, and a
reader that opened it then keeps its descriptor. These files are made with
``os.open(..., O_CREAT | O_EXCL, 0o600)`` under a temporary name in the same folder, written
there, and only then given their name (a hard link, or a rename where replacing is wanted),
so the name never shows a partial or an exposed file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from ..files import open_dir

SECRET_MODE = 0o600


def write_secret(path: Path, data: bytes, *, replace: bool = False) -> bool:
    """Write `data` to `path` as a 0600 file; False when it exists and `replace` is not set.
    Its folder is checked (and made 0700) by `files.open_dir`: nobody else's, never a link."""
    folder = open_dir(path.parent, create=True)
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, SECRET_MODE, dir_fd=folder)
        try:
            os.fchmod(fd, SECRET_MODE)  # exactly 0600 whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            return True
        try:  # fails when `path` exists: never replaced by a race
            os.link(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder)
        os.close(folder)
