"""Fixtures for the host pool, probe and sampler tests: real sshd hosts, pools, channel counts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import asyncssh
import pytest

from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.sim.cluster import SshdCluster
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import current_user, is_root
from tests.hosts.helpers import (
    HIVE_HOSTS,
    MIG,
    OLD,
    ChannelLog,
    host_decls,
    needs_sshd,
    settings_for,
)

# The simulated-host fixtures are shared with tests/sim (re-exported, not copied).
from tests.sim.conftest import (  # noqa: F401
    TEST_USERS,
    gpu_processes,
    make_cluster,
    make_local_host,
    shared_dir,
    sim_users,
)


@pytest.fixture(scope="module")
def hive_cluster() -> Iterator[SshdCluster]:
    """Real sshd hosts shared by a test module; tests that break hosts use `make_cluster`."""
    needs_sshd()
    configs = {MIG: preset("mig", MIG), OLD: preset("mixed", OLD)}
    with SshdCluster(list(HIVE_HOSTS), configs=configs) as cluster:
        if is_root():
            for name in TEST_USERS:
                cluster.add_user(name)
        yield cluster


@pytest.fixture
def monitor_user(request: pytest.FixtureRequest) -> str:
    """The account pools log in as by default: a plain test user (a minimal shell rc, as
    NOTES.md advises; root's rc here starts pyenv), else the current user."""
    if is_root():
        return request.getfixturevalue("sim_users")[0]
    return current_user()


@pytest.fixture
def make_pool(
    jp_asyncio_loop: asyncio.AbstractEventLoop, monitor_user: str
) -> Iterator[Callable[..., HostPool]]:
    """Factory of HostPools (`make_pool(cluster, names=…, user=…, **settings)` or
    `make_pool(decls, settings)`); every pool is closed on the test's loop afterwards."""
    pools: list[HostPool] = []

    def make(hosts: Any, settings: SshSettings | None = None, **overrides: Any) -> HostPool:
        if isinstance(hosts, SshdCluster):
            cluster = hosts
            user = overrides.pop("user", monitor_user)
            names = overrides.pop("names", None)
            decls = host_decls(cluster, names, user)
            settings = settings or settings_for(cluster, **overrides)
        else:
            decls = list(hosts)
        pool = HostPool(decls, settings)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        if not jp_asyncio_loop.is_closed():
            jp_asyncio_loop.run_until_complete(pool.close())


@pytest.fixture
def channels(monkeypatch: pytest.MonkeyPatch) -> ChannelLog:
    """Count every session channel any asyncssh client connection opens (run, create_process…).

    Every remote command needs its own session channel, so this counts remote commands exactly,
    whatever helper opened them. `peak` is the most channels open at once per port.
    """
    log = ChannelLog()
    original = asyncssh.SSHClientConnection.create_session

    async def create_session(self: Any, factory: Any, command: Any = (), **kwargs: Any) -> Any:
        port = self.get_extra_info("peername")[1]
        log.sessions[port] += 1
        log.commands.setdefault(port, []).append(str(command))

        def counting_factory() -> Any:
            # The session object is made once the server accepts the channel; its
            # connection_lost runs when the channel has closed (before run() returns).
            session = factory()
            lost = session.connection_lost
            log.in_flight[port] += 1
            log.peak[port] = max(log.peak[port], log.in_flight[port])

            def connection_lost(exc: Any) -> None:
                log.in_flight[port] -= 1
                lost(exc)

            session.connection_lost = connection_lost
            return session

        return await original(self, counting_factory, command, **kwargs)

    monkeypatch.setattr(asyncssh.SSHClientConnection, "create_session", create_session)
    return log
