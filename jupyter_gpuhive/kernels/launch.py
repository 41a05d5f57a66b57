"""What a kernel launch needs and says: its settings, the host command, its marked lines.

The host command finds the interpreter (a path, a conda environment's name, or a command on
the login PATH) and becomes the kernel (`launch_script.py`, exec'd: same pid). The kernel's
marked lines say when its sockets are bound or why it could not start; `describe_failure`
turns a failure into a sentence that names the host and the fix.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HiveError
from ..hosts.backends import KernelBooking
from ..model import HostDecl
from . import launch_script

log = logging.getLogger(__name__)

SCRIPT = Path(launch_script.__file__).read_text(encoding="utf-8")
MARK = launch_script.MARK
PORTS = launch_script.PORTS


class LaunchError(HiveError):
    """The kernel could not start on its host; the message says why and what to do."""

    status = 503


@dataclass
class Launch:
    """What a launch needs: where, as whom, with which interpreter, environment and key."""

    host: HostDecl
    user: str
    python: str  # an interpreter's path, or a conda environment's name
    env: dict[str, str]
    key: str
    signature_scheme: str
    timeout: float = 60.0
    orphan_timeout: float = 20.0  # the kernel exits after this long without a word from us
    image: str | None = None  # run the kernel in this container image (kernels/images.py)
    container: str = ""  # the container's name (images.kernel_name of the kernel id)
    booking: KernelBooking | None = None  # for a host whose engine holds bookings (Slurm)


def python_command(python: str) -> str:
    """Shell lines that set $PY to the interpreter: a path; else a conda environment's name;
    else a command on the login PATH."""
    if "/" in python:
        return f"PY={shlex.quote(python)}"
    name = shlex.quote(python)
    return (
        f'PY=; base=$(conda info --base 2>/dev/null); for p in "$base/envs/"{name}"/bin/python" '
        f'"$HOME/.conda/envs/"{name}"/bin/python"; do [ -x "$p" ] && {{ PY=$p; break; }}; done; '
        f'[ {name} = base ] && [ -n "$base" ] && PY="$base/bin/python"; '
        f'[ -n "$PY" ] || PY=$(command -v {name} 2>/dev/null) || PY={name}'
    )


def shell_command(python: str) -> str:
    """The host command: find the interpreter, then become the kernel (exec, same pid), the
    launch script isolated from the user's files (`-I -S`: see launch_script)."""
    missing = f'echo; echo {MARK}-ERROR \'{{"code": "no-python"}}\'; exit 127'
    return (
        f'{python_command(python)}; [ -x "$PY" ] || {{ {missing}; }}; '
        f'exec "$PY" -I -S -c {shlex.quote(SCRIPT)} boot'
    )


def describe_failure(code: str, launch: Launch, output: str, found: str | None = None) -> str:
    """A marked failure as a sentence naming the host and the fix (`found`: the interpreter
    the name led to)."""
    where, py = launch.host.name, launch.python
    conda = "/" not in py and (found is None or f"/envs/{py}/" in found or py == "base")
    if code == "no-python":
        what = (
            f"user {launch.user} has no conda environment or command {py!r} there"
            if conda
            else f"the interpreter {py} does not exist there for user {launch.user}"
        )
        return (
            f"Cannot start a kernel on {where}: {what}. Set the host's kernel_python to a "
            "Python with ipykernel."
        )  # fmt: skip
    if code == "no-ipykernel":
        pip = found if "/" not in py and found else py
        fix = f"conda install -n {py} ipykernel" if conda else f"{pip} -m pip install ipykernel"
        return (
            f"Cannot start a kernel on {where}: ipykernel is not installed for {py}. "
            f"Install it there with `{fix}` (or set the host's kernel_python to a Python "
            "that has it)."
        )
    if code == "bad-dir":
        return f"Cannot start a kernel on {where}: its socket directory is not private."
    tail = output.strip()[-400:] or "no output"
    return f"The kernel on {where} did not start ({code}): {tail}"


class Output:
    """Reads a kernel's stdout+stderr: keeps the tail, finds the marked lines."""

    def __init__(self) -> None:
        self.tail: deque[str] = deque(maxlen=40)
        self.marked: asyncio.Future[tuple[str, dict[str, Any]]] = (
            asyncio.get_running_loop().create_future()
        )

    def line(self, text: str) -> None:
        if text.startswith(MARK + "-"):
            kind, _, rest = text[len(MARK) + 1 :].partition(" ")
            try:
                fields = json.loads(rest) if rest else {}
            except ValueError:
                fields = {}
            if not self.marked.done():
                self.marked.set_result((kind, fields))
            return
        if text:
            self.tail.append(text)
            log.debug("gpuhive kernel: %s", text)

    def ended(self) -> None:
        if not self.marked.done():
            self.marked.set_result(("EXITED", {}))

    def text(self) -> str:
        return "\n".join(self.tail)
