"""Fixtures for protection tests: a store, a monitored pool with Protection, ptys, SMTP, HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from jupyter_gpuhive.bookings.quotas import LimitService
from jupyter_gpuhive.bookings.reservations import Policy
from jupyter_gpuhive.bookings.service import PROTECTION, Bookings
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.model import HostDecl, Identity, Reservation, utcnow
from jupyter_gpuhive.model.limits import LimitTable
from jupyter_gpuhive.model.violations import ViolationRecord
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.privacy import Privacy
from jupyter_gpuhive.protection.service import Protection, ProtectionSettings
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.ports import free_port
from jupyter_gpuhive.store import Store

# The simulated-host fixtures are shared with tests/sim (re-exported, not copied).
from tests.sim.conftest import (  # noqa: F401
    TEST_USERS,
    gpu_processes,
    make_cluster,
    make_local_host,
    shared_dir,
    sim_users,
)

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
USER_MAP = {"alice": "gh-alice", "bob": "gh-bob"}


def local_decl(host: LocalSimHost) -> HostDecl:
    """A HostDecl for a local simulated host (the pool runs its commands in the sim env)."""
    env = host.env()
    return HostDecl(host.name, transport="local", extra={"env": {k: env[k] for k in SIM_ENV}})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    yield s
    s.close()


@dataclass
class Rig:
    """A monitored pool with Protection on a real store, as the Hive composes them."""

    store: Store
    pool: HostPool
    monitor: Monitor
    protection: Protection
    events: list[dict[str, Any]] = field(default_factory=list)

    async def sweep(self) -> Any:
        return await self.monitor.sampler.sweep()

    def reserve(self, owner: str, ref: str, hours: float = 1.0) -> Reservation:
        gpu = self.store.inventory.gpu(ref)
        assert gpu is not None, ref
        start = utcnow() - timedelta(seconds=1)
        end = start + timedelta(hours=hours)
        return self.store.reservations.create(owner, "paper", "", start, end, [gpu.id])

    def history(self) -> list[ViolationRecord]:
        now = utcnow()
        return self.store.violations.query(now - timedelta(hours=1), now + timedelta(hours=1))


async def _nobody(who: Identity, errand: object = None) -> None:
    """Bookings' `remember`: the rig keeps no identities."""


@pytest.fixture
def make_rig(store: Store, jp_asyncio_loop: asyncio.AbstractEventLoop) -> Iterator[Callable]:
    """Factory: Rig(hosts, ProtectionSettings) with the listener registered on the Monitor."""
    executor = ThreadPoolExecutor(4, thread_name_prefix="test-db")
    rigs: list[Rig] = []

    async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    def make(
        decls: list[HostDecl],
        settings: ProtectionSettings,
        ssh: SshSettings | None = None,
        interval: float = 0.5,
        **kwargs: Any,
    ) -> Rig:
        store.inventory.sync(decls)
        pool = HostPool(decls, ssh)
        monitor = Monitor(store, pool, run, interval=interval, **unwired(pool))
        monitor.sampler.timeout = 5.0  # the stand-in is slow on a busy 2-core box
        events: list[dict[str, Any]] = []
        kwargs.setdefault("publish", events.append)
        limits = LimitService(store, timezone.utc, LimitTable(), Identity)  # none configured
        bookings = Bookings(store, run, Policy(timezone.utc), Identity, Privacy(), limits=limits,
                            remember=_nobody)  # fmt: skip

        async def end(res: Reservation, reason: str) -> Reservation | None:
            return await bookings.end(res.id, PROTECTION, reason)  # as the Hive wires it

        kwargs.setdefault("end_reservation", end)
        protection = Protection(settings, store, pool, run, **kwargs)
        monitor.on_sweep(protection.on_sweep)
        rig = Rig(store, pool, monitor, protection, events)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        jp_asyncio_loop.run_until_complete(rig.protection.stop())
        jp_asyncio_loop.run_until_complete(rig.monitor.stop())
    executor.shutdown(wait=True)


# --- terminals -----------------------------------------------------------------------------


class Terminal:
    """A real pty owned by a user (`script` as that user); we read what appears on it."""

    def __init__(self, user: str) -> None:
        self.proc = subprocess.Popen(
            ["runuser", "-u", user, "--", "script", "-qfc", "sleep 120", "/dev/null"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.seen = b""

    def read(self) -> str:
        assert self.proc.stdout is not None
        with contextlib.suppress(BlockingIOError, TypeError):
            chunk = self.proc.stdout.read()
            if chunk:
                self.seen += chunk
        return self.seen.decode(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def open_terminal() -> Iterator[Callable[[str], Terminal]]:
    """Factory of real ptys owned by test users; closed afterwards."""
    terminals: list[Terminal] = []

    def make(user: str) -> Terminal:
        terminal = Terminal(user)
        terminals.append(terminal)
        return terminal

    yield make
    for terminal in terminals:
        terminal.close()


def tty_count(user: str) -> int:
    out = subprocess.run(["ps", "-o", "tty=", "-u", user], capture_output=True, text=True)
    return len({t.strip() for t in out.stdout.split() if t.startswith("pts/")})


# --- SMTP and HTTP ---------------------------------------------------------------------------


@dataclass
class Mailbox:
    """What a real SMTP server (aiosmtpd) received."""

    port: int
    messages: list[dict[str, Any]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(
            {
                "from": envelope.mail_from,
                "to": list(envelope.rcpt_tos),
                "data": envelope.content.decode(errors="replace"),
            }
        )
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server() -> Iterator[Mailbox]:
    box = Mailbox(free_port())
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    yield box
    controller.stop()


@dataclass
class Hook:
    """What a real HTTP server received as webhook POSTs."""

    url: str
    bodies: list[Any] = field(default_factory=list)


@pytest.fixture
def webhook_server() -> Iterator[Hook]:
    hook = Hook("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            hook.bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield hook
    server.shutdown()
    server.server_close()
