"""Team mode: the service starts reservation kernels for users' servers (it alone holds the keys).

A user's server in client mode has no SSH key and no hosts. It asks the gpuhive service
(`POST kernels/{id}/launch`, with the user's own Hub token) to start the kernel; the service
fixes the owner to the Hub user it authenticated, checks the reservation and starts the kernel
with the `gpuhive` provisioner's own machinery (as the owner, on the reserved GPUs, over the
service's SSH pool). It then relays the kernel's five ZMQ channels to Unix sockets that only
the owner's UNIX user may open (the account the kernel runs as, and the one a local
JupyterHub spawner runs their server as): sockets of that user, mode 0600, in a directory of
the service's that nobody else can change (mode 0710, group: the user's primary group). It
hands back those socket paths and the kernel's HMAC key; the user's kernel manager connects
with transport "ipc". Signals, polls and clean-ups come back here and are refused for anyone
but the owner or an admin; a launch (which returns the key) only for the owner.

No TCP port is opened anywhere: the kernel's own sockets are the provisioner's (a private
directory on its host, reached over SSH), and the relay's are filesystem sockets that only
the owner (and root) may open. A kernel nobody asks about for `LEASE` seconds (its server
stopped without shutting it down) is shut down.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import pwd
import secrets
import shutil
import signal as signals
import socket
import stat
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.session import Session
from traitlets import Any as AnyTrait
from traitlets import Unicode
from traitlets.config import LoggingConfigurable

from ..errors import Conflict, Forbidden, HiveError, NotFound, Unavailable
from ..model import Identity
from ..model.kernel import KernelState
from . import sockdirs
from .launch_script import PORTS, SOCKET_NAME
from .provisioner import GpuHiveProvisioner
from .registry import KernelRegistry

log = logging.getLogger(__name__)

LEASE = 90.0  # seconds without a call from its server before a kernel is shut down
SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
MAX_ENV = 64  # variables a launch may pass (the user's kernelspec env and session name)
_WHO: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("gpuhive_broker_who",
                                                                      default=None)  # fmt: skip


class _ServiceSide(LoggingConfigurable):
    """What the provisioner expects of its kernel manager, in the service (no manager)."""

    session = AnyTrait()
    gpuhive_kernels = AnyTrait()
    reason = Unicode("")


@dataclass
class _Brokered:
    """One kernel the service runs for a user's server."""

    kernel_id: str
    owner: str
    provisioner: GpuHiveProvisioner
    relay: Relay
    key: str
    seen: float = field(default_factory=time.monotonic)


class Relay:
    """Five Unix sockets only `uid` may open, each piped to the kernel's socket of its channel.

    The directory stays the service's own (mode 0710, group: the user's primary group), so
    the user can reach the sockets but never add, remove or swap anything in it: everything
    made there is made where only the service writes. The sockets are the user's (0600).
    """

    def __init__(self, root: Path, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self.dir = tempfile.mkdtemp(prefix="k-", dir=root)  # 0700, the service's user
        if uid != os.geteuid():
            os.chown(self.dir, -1, gid)
            os.chmod(self.dir, 0o710)  # noqa: S103 - the user's group may enter, not write
        self.target = ""  # the kernel's ipc prefix (PREFIX-1 … PREFIX-5)
        self.servers: dict[int, asyncio.AbstractServer] = {}
        self.pipes: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return os.path.join(self.dir, SOCKET_NAME)

    async def open(self) -> None:
        """Listen on each channel's socket; again where one is gone (a kernel manager removes
        its ipc files when the kernel restarts)."""
        for port in PORTS.values():
            path = f"{self.address}-{port}"
            if port in self.servers and os.path.lexists(path):  # noqa: ASYNC240 - one lstat
                continue
            old = self.servers.pop(port, None)
            if old is not None:
                old.close()
            self.servers[port] = await asyncio.start_unix_server(
                functools.partial(self._pipe, port=port), path=path
            )
            os.chmod(path, 0o600)
            if self.uid != os.geteuid():
                os.chown(path, self.uid, self.gid, follow_symlinks=False)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    port: int) -> None:  # fmt: skip
        self.pipes.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(f"{self.target}-{port}")
        except OSError:
            self.pipes.discard(writer)
            writer.close()  # the kernel is (re)starting: ZMQ connects again by itself
            return
        peer = _peer_uid(up_writer)
        if peer not in (os.geteuid(), self.uid):  # neither our forward nor the user's kernel
            log.warning("gpuhive: relay %s: the kernel's socket %s-%d belongs to uid %s; "
                        "not connected", self.dir, self.target, port, peer)  # fmt: skip
            up_writer.close()
            self.pipes.discard(writer)
            writer.close()
            return
        self.pipes.add(up_writer)
        await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        self.pipes.discard(writer)
        self.pipes.discard(up_writer)

    def cut(self) -> None:
        """Drop every open pipe (the kernel went; its clients reconnect to the next one)."""
        for writer in list(self.pipes):
            writer.close()
        self.pipes.clear()

    async def close(self) -> None:
        for server in self.servers.values():
            server.close()
        self.cut()
        self.servers.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The uid of the process that listens on the other end of a Unix socket."""
    sock = writer.get_extra_info("socket")
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None
    return int(struct.unpack("3i", creds)[1])


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def _target(prefix: str) -> str:
    """The kernel's socket prefix, when its directory is one this server made and alone may
    write (the forwards' of an SSH kernel, the links of a local one); never a path a kernel
    printed."""
    try:
        sockdirs.check_private(os.path.dirname(prefix))
    except sockdirs.NotOurs as error:
        raise Unavailable(f"The kernel's sockets are not in a directory of ours: {error}") from None
    return prefix


def socket_root(configured: str) -> Path:
    """The parent of the relay directories: ours, not a symlink, writable by us only. By
    default gpuhive's own runtime directory (/run/gpuhive/kernels as root), never a fixed
    name in a world-writable directory that another user could make first."""
    if not configured:
        return sockdirs.kernels_dir()
    path = Path(configured)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o711, parents=True)
    info = path.lstat()
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
            or info.st_mode & 0o022):  # fmt: skip
        raise Unavailable(
            f"The kernel socket directory {path} is not a directory of the gpuhive service's "
            "own user writable by it alone: set c.GpuHiveApp.kernel_socket_dir to one."
        )
    os.chmod(path, 0o711)  # noqa: S103 - users may pass through to their own directory, never list it
    return path


class KernelBroker:
    """The service's kernels for users' servers: launch, poll, signal, clean up."""

    def __init__(self, registry: KernelRegistry, socket_dir: str = "", lease: float = LEASE):
        self.registry = registry
        self.socket_dir = socket_dir
        self.lease = lease
        self._kernels: dict[str, _Brokered] = {}
        self._reaper: asyncio.Task[None] | None = None
        registry.requester = _WHO.get  # the service's requester: the Hub user of the call

    # --- what users' servers ask --------------------------------------------------------

    async def launch(self, who: Identity, kernel_id: str, reservation_id: int,
                     host: str | None, env: dict[str, str]) -> dict[str, Any]:  # fmt: skip
        """Start (or restart) the kernel as `who`; its connection info for `who`'s server."""
        entry = self._kernels.get(kernel_id)
        if entry is None:
            if self.registry.get(kernel_id) is not None:
                raise Conflict(f"Kernel id {kernel_id} is taken: start the kernel afresh.")
            entry = await self._new(who, kernel_id, reservation_id, host, env)
        elif entry.owner != who.name:
            raise Forbidden(
                f"Kernel {kernel_id} belongs to {entry.owner}: only {entry.owner} may start it "
                "or connect to it."
            )
        entry.seen = time.monotonic()
        first = self.registry.get(kernel_id) is None
        token = _WHO.set(who)
        try:
            kwargs = await entry.provisioner.pre_launch(env=dict(env))
            info = await entry.provisioner.launch_kernel(kwargs.pop("cmd"), **kwargs)
            entry.relay.cut()
            entry.relay.target = _target(str(info["ip"]))
            await entry.relay.open()
        except BaseException:
            if first:
                await self._end(kernel_id, "its launch failed")
            raise
        finally:
            _WHO.reset(token)
        self._start_reaper()
        return self._answer(entry)

    async def process(self, who: Identity, kernel_id: str) -> dict[str, Any]:
        """Whether the kernel's process runs, its exit status, its state and why."""
        entry = self._entry(who, kernel_id, "see")
        code = await entry.provisioner.poll()
        return self._state(entry, code)

    async def signal(self, who: Identity, kernel_id: str, name: str) -> dict[str, Any]:
        """A signal to the kernel's process group on its host."""
        entry = self._entry(who, kernel_id, "signal")
        await entry.provisioner.send_signal(int(getattr(signals, name)))
        return self._state(entry, await entry.provisioner.poll())

    async def cleanup(self, who: Identity, kernel_id: str, restart: bool) -> dict[str, Any]:
        """After the process ended: drop what it used (all of it, unless it restarts)."""
        entry = self._entry(who, kernel_id, "shut down")
        code = await entry.provisioner.poll()
        if code is None:  # still running (a forced shutdown): stop it first
            await entry.provisioner.kill(restart)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    code = await entry.provisioner.wait()
        await entry.provisioner.cleanup(restart)
        entry.relay.cut()
        answer = self._state(entry, code if code is not None else 0)
        if not restart:
            await self._drop(kernel_id)
        return answer

    async def close(self) -> None:
        """The service stops: every brokered kernel ends."""
        if self._reaper is not None:
            self._reaper.cancel()
        for kernel_id in list(self._kernels):
            await self._end(kernel_id, "the gpuhive service stopped")

    # --- inside -------------------------------------------------------------------------

    async def _new(self, who: Identity, kernel_id: str, reservation_id: int,
                   host: str | None, env: dict[str, str]) -> _Brokered:  # fmt: skip
        res = await self.registry.reservation(reservation_id)
        if res.owner != who.name:  # before anything is made (the provisioner checks again)
            raise Forbidden(
                f"Reservation {res.id} is {res.owner}'s: only {res.owner} can start a kernel "
                "on it (it runs as their account)."
            )
        unix = self.registry.unix_user(who.name)
        try:
            account = pwd.getpwnam(unix)
        except KeyError:
            raise Unavailable(f"There is no UNIX user {unix} on the service's machine.") from None
        if account.pw_uid != os.geteuid() and os.geteuid() != 0:
            raise Unavailable(
                f"The gpuhive service does not run as root, so it cannot give {unix} a private "
                "socket directory for the kernel: run the service as root, as JupyterHub's "
                "local spawners do."
            )
        key = secrets.token_hex(32)
        side = _ServiceSide(session=Session(key=key.encode(), signature_scheme="hmac-sha256"),
                            gpuhive_kernels=self.registry)  # fmt: skip
        spec = KernelSpec(name=f"gpuhive-r{reservation_id}", display_name="gpuhive",
                          language="python", argv=["ipykernel"], env=dict(env))  # fmt: skip
        provisioner = GpuHiveProvisioner(kernel_id=kernel_id, kernel_spec=spec, parent=side,
                                         reservation_id=reservation_id, host=host)  # fmt: skip
        relay = Relay(socket_root(self.socket_dir), account.pw_uid, account.pw_gid)
        entry = _Brokered(kernel_id, who.name, provisioner, relay, key)
        self._kernels[kernel_id] = entry
        return entry

    def _entry(self, who: Identity, kernel_id: str, action: str) -> _Brokered:
        entry = self._kernels.get(kernel_id)
        if entry is None:
            raise NotFound(f"The gpuhive service runs no kernel {kernel_id} for a server.")
        if not (who.is_admin or who.name == entry.owner):
            raise Forbidden(
                f"Kernel {kernel_id} belongs to {entry.owner}: only {entry.owner} or an admin "
                f"may {action} it."
            )
        if who.name == entry.owner:
            entry.seen = time.monotonic()
        return entry

    def _answer(self, entry: _Brokered) -> dict[str, Any]:
        record = self.registry.get(entry.kernel_id)
        return {
            "connection": {"transport": "ipc", "ip": entry.relay.address, **PORTS,
                           "key": entry.key, "signature_scheme": "hmac-sha256"},
            "kernel": record.to_json() if record is not None else None,
        }  # fmt: skip

    def _state(self, entry: _Brokered, code: int | None) -> dict[str, Any]:
        record = self.registry.get(entry.kernel_id)
        return {"running": code is None, "exit_status": code,
                "state": str(record.state if record is not None else KernelState.ENDED),
                "reason": record.reason if record is not None else None}  # fmt: skip

    async def _drop(self, kernel_id: str) -> None:
        entry = self._kernels.pop(kernel_id, None)
        if entry is not None:
            await entry.relay.close()

    async def _end(self, kernel_id: str, reason: str) -> None:
        entry = self._kernels.get(kernel_id)
        if entry is None:
            return
        try:
            if await entry.provisioner.poll() is None:
                await entry.provisioner.kill()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):
                        await entry.provisioner.wait()
            self.registry.ended(kernel_id, KernelState.ENDED, reason)
            await entry.provisioner.cleanup()
        except HiveError as error:
            log.warning("gpuhive: ending brokered kernel %s: %s", kernel_id, error)
        finally:
            await self._drop(kernel_id)

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        """Shut down kernels whose server stopped asking (crashed, or stopped without them)."""
        while self._kernels:
            await asyncio.sleep(min(10.0, self.lease / 3))
            now = time.monotonic()
            for kernel_id, entry in list(self._kernels.items()):
                if now - entry.seen > self.lease:
                    why = f"its server was not heard from for {self.lease:.0f} s"
                    log.warning("gpuhive: kernel %s of %s: %s; shutting it down", kernel_id,
                                entry.owner, why)  # fmt: skip
                    await self._end(kernel_id, why)
