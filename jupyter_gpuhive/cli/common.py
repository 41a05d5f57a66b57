"""What every `jupyter gpuhive` command shares: its settings without the server, and one
sentence (and a non-zero status) instead of a traceback when the world says no.

Light on purpose: `jupyter gpuhive --help` imports this and the command classes only; the
store, SSH and the Jupyter server are imported inside the commands that use them.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import NoReturn

from ..errors import HiveError
from ..server.settings import GpuHiveSettings


class GpuHiveApp(GpuHiveSettings):
    """gpuhive's settings (`c.GpuHiveApp.…`) as the server reads them, without the server."""


def fail(message: str, status: int = 1) -> NoReturn:
    """Print one sentence on stderr and exit with `status`."""
    print(message, file=sys.stderr)
    sys.exit(status)


def unreachable(name: str, address: str, port: int, error: BaseException) -> str:
    """Why connecting to a host failed, as one sentence with the next step."""
    where = f"{name} ({address}:{port})"
    if isinstance(error, socket.gaierror):
        return (
            f"Cannot reach {where}: the name {address!r} does not resolve; check the address "
            f"(jupyter gpuhive hosts remove {name}, then hosts add it again)."
        )
    if isinstance(error, ConnectionRefusedError):
        return (
            f"Cannot reach {where}: the connection was refused; is sshd running there, on "
            f"port {port}?"
        )
    if isinstance(error, TimeoutError):
        return f"Cannot reach {where}: no SSH answer in time; check the address and firewall."
    reason = _reason(error)
    return f"Cannot reach {where}: {reason}"


def describe(error: BaseException) -> str | None:
    """One sentence for an error a person can fix (None: a bug, keep its traceback)."""
    if isinstance(error, HiveError):
        return error.message
    if type(error).__module__.split(".")[0] == "asyncssh":
        return f"SSH failed: {_reason(error)}"
    if isinstance(error, socket.gaierror):
        return f"A host name does not resolve: {error.strerror or error}."
    if isinstance(error, ConnectionRefusedError):
        return f"The connection was refused: {error.strerror or error}."
    if isinstance(error, TimeoutError):
        return "Timed out waiting for an answer."
    if isinstance(error, OSError):
        what = f" {error.filename}" if error.filename else ""
        return f"Cannot use{what}: {error.strerror or error}."
    if isinstance(error, UnicodeDecodeError):
        return f"A file is not valid UTF-8 text: {error}."
    return None


def _reason(error: BaseException) -> str:
    """The error's own words, ending with a full stop."""
    text = str(getattr(error, "reason", "") or error or type(error).__name__).strip()
    return text if text.endswith(".") else text + "."


def run(launch: Callable[[], object]) -> None:
    """Run a command; known errors end in one sentence on stderr and status 1."""
    try:
        launch()
    except KeyboardInterrupt:
        fail("Interrupted.", 130)
    except Exception as error:
        message = describe(error)
        if message is None:
            raise
        fail(message)
