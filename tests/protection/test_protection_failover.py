"""A new leader continues the violations the old one left open (issue #33 item 4).

Two replicas' worth of monitoring on one PostgreSQL database: two Stores, Monitors and
Protections (as two service replicas build them), a real local simulated host and a real
offending process. Leader 1 detects the violation and sends the first notice, then stops
without a word (as when killed); leader 2 takes over: the same violation row, no second
first notice, the ladder's next step from leader 2, the row closed when the process ends.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.model import HostDecl, utcnow
from jupyter_gpuhive.model.violations import ViolationRecord
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.protection import service
from jupyter_gpuhive.protection.service import Protection, ProtectionSettings
from jupyter_gpuhive.sim.cluster import start_gpu_process
from jupyter_gpuhive.store import Store
from tests.protection.conftest import USER_MAP, local_decl
from tests.support.postgres import PostgresCluster
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")

FIRST, SECOND = "first notice", "second notice"
SETTINGS = ProtectionSettings(
    level=1,
    user_map=USER_MAP,
    ladder=[
        {"after": 0, "handler": "event", "message": FIRST},
        {"after": 1.0, "handler": "later", "message": SECOND},
    ],
    handlers={"later": {"type": "event"}},
)


class Replica:
    """What one service replica runs for monitoring: its own Store, Monitor and Protection."""

    def __init__(self, url: str, decls: list[HostDecl], run: Callable[..., Any]) -> None:
        self.store = Store(url).open()
        self.store.inventory.sync(decls)
        pool = HostPool(decls)
        self.monitor = Monitor(self.store, pool, run, interval=0.3, **unwired(pool))
        self.monitor.sampler.timeout = 5.0  # the stand-in is slow on a busy 2-core box
        self.notices: list[str] = []
        self.protection = Protection(
            SETTINGS, self.store, self.monitor.pool, run,
            publish=lambda event: self.notices.append(event["message"]),
        )  # fmt: skip
        self.monitor.on_sweep(self.protection.on_sweep)

    async def sweep(self) -> None:
        await self.monitor.sampler.sweep()
        await self.protection.drain()  # the handler calls it fired, and their records

    def history(self) -> list[ViolationRecord]:
        now = utcnow()
        return self.store.violations.query(now - timedelta(hours=1), now + timedelta(hours=1))

    async def close(self) -> None:
        await self.protection.stop()
        await self.monitor.stop()
        self.store.close()


@pytest.fixture
def replicas(
    postgres: PostgresCluster, jp_asyncio_loop: asyncio.AbstractEventLoop
) -> Iterator[Callable[[list[HostDecl]], tuple[Replica, Replica]]]:
    executor = ThreadPoolExecutor(4, thread_name_prefix="test-db")
    made: list[Replica] = []

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args))

    def make(decls: list[HostDecl]) -> tuple[Replica, Replica]:
        url = postgres.new_database()
        made.extend([Replica(url, decls, run), Replica(url, decls, run)])
        return made[-2], made[-1]

    yield make
    for replica in made:
        jp_asyncio_loop.run_until_complete(replica.close())
    executor.shutdown(wait=True)


async def _offence(sim_users, make_local_host, gpu_processes, replicas) -> Any:
    """Leader 1 finds bob's process on alice's GPU and sends the first notice."""
    host = make_local_host()
    one, two = replicas([local_decl(host)])
    await one.sweep()  # discovery fills the inventory
    gpu = one.store.inventory.gpu(f"{host.name}:0")
    assert gpu is not None
    now = utcnow()
    one.store.reservations.create("alice", "paper", "", now - timedelta(seconds=1),
                                  now + timedelta(hours=1), [gpu.id])  # fmt: skip
    bob = start_gpu_process(host.name, [0], user="gh-bob")
    gpu_processes.append(bob)

    async def opened() -> bool:
        await one.sweep()
        return bool(one.notices)

    await until(opened, timeout=30)
    (violation,) = one.history()
    assert one.notices == [FIRST] and violation.ended_at is None
    assert [(a.step, a.handler) for a in violation.actions] == [(0, "event")]
    return one, two, bob, violation


async def test_a_new_leader_continues_the_open_violation(
    sim_users, make_local_host, gpu_processes, replicas
) -> None:
    one, two, bob, violation = await _offence(sim_users, make_local_host, gpu_processes, replicas)
    # Leader 1 stops without a word (killed); leader 2 sweeps from here on.
    await two.sweep()
    (same,) = two.history()
    assert same.id == violation.id and same.ended_at is None  # the same row, still open
    assert two.notices == []  # no second round of notices
    (case,) = two.protection.escalation.cases.values()
    assert case.id == violation.id and case.fired == {0}

    async def next_step() -> bool:
        await two.sweep()
        return bool(two.notices)

    await until(next_step, timeout=30)  # the ladder goes on: step 1, from leader 2
    assert two.notices == [SECOND]
    (after,) = two.history()
    assert [(a.step, a.handler) for a in after.actions] == [(0, "event"), (1, "later")]
    assert one.notices == [FIRST]

    bob.kill()
    bob.wait()

    async def ended() -> list[ViolationRecord]:
        await two.sweep()
        return [v for v in two.history() if v.ended_at is not None]

    (closed,) = await until(ended, timeout=30)
    assert closed.id == violation.id and len(two.history()) == 1
    assert two.notices == [SECOND]  # nothing more was sent


async def test_after_a_long_outage_the_violation_starts_anew(
    sim_users, make_local_host, gpu_processes, replicas, monkeypatch
) -> None:
    _, two, _, violation = await _offence(sim_users, make_local_host, gpu_processes, replicas)
    # Not seen for longer than RESUME_WITHIN (here: at all): closed as by a previous run.
    monkeypatch.setattr(service, "RESUME_WITHIN", timedelta(0))
    await two.sweep()
    records = {v.id: v for v in two.history()}
    assert len(records) == 2
    assert records[violation.id].ended_at == records[violation.id].last_seen_at
    (new,) = [v for v in records.values() if v.id != violation.id]
    assert new.ended_at is None and new.offender == violation.offender
    assert two.notices == [FIRST]  # a new violation: its first notice
