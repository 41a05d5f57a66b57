"""What is wrong with gpuhive's own SSH key files, in words, when asyncssh cannot load them.

asyncssh loads the client keys before it connects; a bad key file is no fault of the host,
but its error (a bare `ValueError('Public key mismatch')`, a `FileNotFoundError`) said
nothing of the key, and the host stayed "unknown". `key_problem` names the file and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncssh


def _one(path: str) -> str | None:
    """The problem of one private key file (and its .pub), or None when it loads."""
    try:
        asyncssh.load_keypairs([path])
    except FileNotFoundError:
        return (
            f"gpuhive's SSH private key {path} does not exist: make it with `jupyter gpuhive "
            "key` (then add the line it prints to the hosts' authorized_keys), or set "
            "c.GpuHiveApp.ssh_key to the key."
        )
    except OSError as error:
        return f"gpuhive's SSH private key {path} cannot be read: {error.strerror or error}."
    except asyncssh.KeyImportError as error:
        return f"gpuhive's SSH private key {path} cannot be used: {error}."
    except ValueError as error:
        if "mismatch" not in str(error).lower():
            return f"gpuhive's SSH key {path} cannot be used: {error}."
        return (
            f"gpuhive's SSH public key {path}.pub does not match its private key {path} "
            f"(replaced or edited?). Write the private key's own: `ssh-keygen -y -f {path} "
            f"> {path}.pub` (or remove {path}.pub); `jupyter gpuhive key` prints the public "
            "key the hosts' authorized_keys must hold."
        )
    return None


def key_problem(paths: Sequence[str], error: BaseException) -> str | None:
    """Why the client keys `paths` stopped a connection with `error`; None: not the keys."""
    if isinstance(error, OSError):
        if error.filename not in paths:
            return None  # about something else (the host's address, a socket)
    elif not isinstance(error, ValueError):
        return None
    for path in paths:
        problem = _one(path)
        if problem is not None:
            return problem
    return None
