"""The sweeping process: probes every host on its own interpreter and sends each sweep back.

A sweep over 100s of hosts is a second of SSH work in Python. In the server's process it
would compete with the API for the interpreter (the GIL), so it runs in a child process with
its own connections; the server only unpickles each finished sweep (a few ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from multiprocessing.connection import Connection

from ..hosts.pool import HostPool, SshSettings
from ..model import HostDecl
from .published import encode
from .sampler import Sampler, Sweep

log = logging.getLogger(__name__)


def main(conn: Connection, hosts: list[HostDecl], ssh: SshSettings, interval: float,
         timeout: float) -> None:  # fmt: skip
    """Entry point of the child process: sweep until the parent closes the pipe."""
    logging.basicConfig(level=logging.WARNING, format="[gpuhive sampler %(levelname)s] %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_sweep_forever(conn, hosts, ssh, interval, timeout))


async def _sweep_forever(
    conn: Connection, hosts: list[HostDecl], ssh: SshSettings, interval: float, timeout: float
) -> None:
    pool = HostPool(hosts, ssh)
    sampler = Sampler(pool, interval=interval, history=2, timeout=timeout)

    async def send(sweep: Sweep) -> None:
        try:
            statuses = pool.statuses()
            # encoded here, on this process's interpreter, for the leader to publish as is
            conn.send((sweep, statuses, encode(sweep, statuses)))
        except (BrokenPipeError, OSError):
            raise asyncio.CancelledError from None

    sampler.on_sweep(send)  # its only listener: every sweep goes to the server
    running = asyncio.current_task()
    loop = asyncio.get_running_loop()

    # The parent never writes: the pipe turns readable only when it closes (or dies), and stays
    # so (level-triggered): one call is enough, later ones would only spin the loop.
    def parent_gone() -> None:
        loop.remove_reader(conn.fileno())
        if running is not None:
            running.cancel()

    loop.add_reader(conn.fileno(), parent_gone)
    try:
        await sampler.run()
    except asyncio.CancelledError:
        pass
    finally:
        loop.remove_reader(conn.fileno())
        await pool.close()
