"""The hosts file: read, edited by `jupyter gpuhive hosts add|remove`, watched by the server.

TOML (a `[[hosts]]` table per host) or JSON (a list, or an object with a `hosts` list), by the
file's suffix. Its default place is `gpuhive_hosts.toml` in the Jupyter config directory; it is
read only when it exists and created by the first `hosts add`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import tomllib
from jupyter_core.paths import jupyter_config_dir

from ..errors import Invalid
from ..files import write_file

log = logging.getLogger(__name__)

DEFAULT_NAME = "gpuhive_hosts.toml"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_HEADER = (
    "# GPU hosts of jupyter-gpuhive, one [[hosts]] table each (see `jupyter gpuhive hosts "
    "--help`).\n# A running server re-reads this file when it changes.\n"
)


def default_hosts_file() -> Path:
    """`gpuhive_hosts.toml` in the Jupyter config directory (`jupyter --config-dir`)."""
    return Path(jupyter_config_dir()) / DEFAULT_NAME


def read_hosts(path: Path) -> list[dict[str, Any]]:
    """The host entries of `path` ([] when it does not exist); Invalid when unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise Invalid(f"Cannot read the hosts file {path}: {error.strerror}.") from None
    try:
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text or "[]")
    except (tomllib.TOMLDecodeError, ValueError) as error:
        raise Invalid(f"The hosts file {path} is not valid {_kind(path)}: {error}") from None
    hosts = data.get("hosts", []) if isinstance(data, dict) else data
    if not isinstance(hosts, list):
        raise Invalid(f"The hosts file {path} must hold a list of hosts ('hosts').")
    return hosts


def _kind(path: Path) -> str:
    return "TOML" if path.suffix == ".toml" else "JSON"


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise Invalid(f"Cannot write {value!r} to a TOML hosts file.")


def toml_table(spec: dict[str, Any]) -> str:
    """One `[[hosts]]` table (nested values as inline tables)."""
    lines = ["[[hosts]]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in spec.items() if v is not None]
    return "\n".join(lines) + "\n"


def _leading_comments(text: str) -> str:
    kept = []
    for line in text.splitlines(keepends=True):
        if not line.strip().startswith("#") and line.strip():
            break
        kept.append(line)
    return "".join(kept)


def _write(path: Path, text: str) -> None:
    """Replace `path` at once (a server re-reading it never sees half a file), keeping its
    mode; never through a link or into a folder others may write (files.py)."""
    write_file(path, text)


def write_hosts(path: Path, hosts: list[dict[str, Any]]) -> None:
    """Write the whole host list (a TOML file keeps its leading comments)."""
    if path.suffix == ".toml":
        old = path.read_text() if path.exists() else ""
        head = _leading_comments(old).rstrip() or _HEADER.rstrip()
        _write(path, head + "\n" + "".join("\n" + toml_table(h) for h in hosts))
    else:
        _write(path, json.dumps(hosts, indent=2) + "\n")


def add_host(path: Path, spec: dict[str, Any]) -> None:
    """Append one host; a TOML file keeps everything it had, comments included."""
    hosts = read_hosts(path)
    if any(isinstance(h, dict) and h.get("name") == spec["name"] for h in hosts):
        raise Invalid(f"{path} already has a host named {spec['name']!r}.")
    if path.suffix == ".toml" and path.exists():
        old = path.read_text()
        text = old + ("" if old.endswith("\n") or not old else "\n") + "\n" + toml_table(spec)
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            write_hosts(path, [*hosts, spec])  # e.g. `hosts = [...]` inline: rewrite it all
            return
        _write(path, text)
        return
    write_hosts(path, [*hosts, spec])


def remove_host(path: Path, name: str) -> None:
    """Remove the host called `name`; Invalid when the file has none."""
    hosts = read_hosts(path)
    kept = [h for h in hosts if not (isinstance(h, dict) and h.get("name") == name)]
    if len(kept) == len(hosts):
        raise Invalid(f"{path} has no host named {name!r}.")
    write_hosts(path, kept)


def stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file does: (inode, size, mtime in ns); None when missing."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class HostsFileWatcher:
    """Calls `on_change` when the hosts file changes (checked every `interval` seconds)."""

    def __init__(
        self, path: Path, interval: float, on_change: Callable[[], Awaitable[None]]
    ) -> None:
        self.path = path
        self.interval = interval
        self.on_change = on_change
        self._seen = stamp(path)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="gpuhive-hosts-file")

    async def check(self) -> bool:
        """Look once; True when the file changed (and `on_change` ran)."""
        now = stamp(self.path)
        if now == self._seen:
            return False
        self._seen = now
        await self.on_change()
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception:  # one bad round never ends the watch
                log.exception("gpuhive: reading the hosts file %s failed", self.path)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
