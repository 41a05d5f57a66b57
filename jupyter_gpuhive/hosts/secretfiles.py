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

SECRET_MODE = 0o600


def write_secret(path: Path, data: bytes, *, replace: bool = False) -> bool:
    """Write `data` to `path` as a 0600 file; False when it exists and `replace` is not set."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, SECRET_MODE)
    try:
        try:
            os.fchmod(fd, SECRET_MODE)  # exactly 0600 whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # fails when `path` exists: never replaced by a race
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
