"""Who sees which violations: the holder, the offender and admins (or all, without processes)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from tests.api.helpers import refused
from tests.conftest import Call, book

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as test users"),
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
OFFENDER = "gh-bob"  # bob's UNIX account (c.GpuHiveApp.unix_users)


@pytest.fixture
def sim_host(tmp_path: Path) -> LocalSimHost:
    return LocalSimHost("gpu1", tmp_path / "sim")


@pytest.fixture
def privacy() -> dict[str, Any]:
    return {}


@pytest.fixture
def hive_config(sim_host: LocalSimHost, privacy: dict[str, Any]) -> dict[str, Any]:
    env = sim_host.env()
    return {
        "hosts": [{"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
        "unix_users": {"bob": OFFENDER},
        **privacy,
    }


@pytest.fixture
def intruder(
    api: Any, jp_serverapp: Any, jp_asyncio_loop: Any, sim_host: LocalSimHost
) -> Iterator[tuple[int, int]]:
    """alice's reservation of gpu1:3 and bob's (gh-bob's) process on it: (reservation, pid)."""
    ensure_user(OFFENDER)
    hive = jp_serverapp.web_app.settings["gpuhive"]
    jp_asyncio_loop.run_until_complete(hive.start())
    alice = api("alice")

    async def booked() -> int:
        async with asyncio.timeout(15):
            while not (await alice("GET", "hosts")).body["hosts"][0]["gpus"]:
                await asyncio.sleep(0.2)
        made = await book(alice, "mine", ["gpu1:3"], hive.now())
        return int(made.body["id"])

    rid = jp_asyncio_loop.run_until_complete(booked())
    proc = sim_host.start_process([3], user=OFFENDER, mem_mib=1000, util=50)
    try:
        yield rid, proc.pid
    finally:
        proc.kill()
        proc.wait()
        jp_asyncio_loop.run_until_complete(hive.stop())


async def ours(call: Call, pid: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """The violation(s) by the intruder that `call`'s user sees: history, ongoing, raw text."""
    reply = await call("GET", "violations")
    assert reply.status == 200, reply
    history = [v for v in reply.body["violations"] if v["gpu"] == "gpu1:3"]
    ongoing = [v for v in reply.body["ongoing"] if v["gpu"] == "gpu1:3"]
    return history, ongoing, json.dumps(reply.body)


async def recorded(call: Call, pid: int) -> None:
    """Wait until the violation is open and a handler's action is recorded."""
    async with asyncio.timeout(20):
        while True:
            history, ongoing, _ = await ours(call, pid)
            if history and history[0]["actions"] and ongoing:
                return
            await asyncio.sleep(0.2)


async def test_violations_are_shown_to_the_holder_the_offender_and_admins(api, intruder):
    rid, pid = intruder
    alice, bob, carol, boss = api("alice"), api("bob"), api("carol"), api("boss")
    await recorded(boss, pid)
    for involved in (alice, bob, boss):  # holder, offender (as gh-bob), admin
        history, ongoing, _ = await ours(involved, pid)
        assert [(v["holder"], v["offender"]) for v in history] == [("alice", OFFENDER)]
        assert history[0]["pids"] == [pid] and history[0]["commands"]
        assert history[0]["actions"][0]["detail"]
        assert ongoing[0]["pids"] == [pid] and ongoing[0]["commands"]
    seen = (await carol("GET", "violations")).body
    assert seen["violations"] == [] and seen["ongoing"] == []
    narrowed = await carol("GET", "violations", params={"user": OFFENDER})
    assert narrowed.body["violations"] == [] and narrowed.body["ongoing"] == []
    # alice's reservation usage lists it for her; carol may not read that usage at all
    usage = await alice("GET", f"reservations/{rid}/usage")
    assert [v["pids"] for v in usage.body["violations"]] == [[pid]]
    refused(await carol("GET", f"reservations/{rid}/usage"), 403, "alice")


@pytest.mark.parametrize("privacy", [{"public_violations": True, "public_usage": True}])
async def test_public_violations_hide_the_processes_of_others(api, intruder):
    rid, pid = intruder
    alice, carol = api("alice"), api("carol")
    await recorded(alice, pid)
    history, ongoing, text = await ours(carol, pid)
    assert [(v["holder"], v["offender"]) for v in history + ongoing] == [("alice", OFFENDER)] * 2
    for shown in history + ongoing:
        assert "pids" not in shown and "commands" not in shown
    assert history[0]["actions"] and all("detail" not in a for a in history[0]["actions"])
    assert f"[{pid}]" not in text
    usage = await carol("GET", f"reservations/{rid}/usage")
    assert usage.status == 200 and usage.body["violations"][0]["offender"] == OFFENDER
    assert "pids" not in usage.body["violations"][0]
    history, _, _ = await ours(alice, pid)
    assert history[0]["pids"] == [pid]
