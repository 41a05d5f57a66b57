"""Webhook events from the running server: reminders, jobs started/ended, violations."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from tests.conftest import USERS, book, iso
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook
from tests.support.waiting import until

OWNER = "hivejob1"  # a real UNIX user (as in tests/api/test_jobs_api.py)
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run jobs as a user"),
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]


@pytest.fixture
def sim_host(tmp_path: Path) -> LocalSimHost:
    ensure_user(OWNER)
    return LocalSimHost("gpu1", tmp_path / "sim")


@pytest.fixture
def privacy() -> dict[str, Any]:
    """GpuHiveApp privacy traits of the server under test (parametrized per test)."""
    return {}


@pytest.fixture
def hive_config(sim_host: LocalSimHost, privacy: dict[str, Any]) -> dict[str, Any]:
    env = sim_host.env()
    return {
        **privacy,
        "hosts": [{"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
        "reminder_interval": 0.2,
        "reminder_minutes": 10,
        "webhook_backoff": 0.2,
        "webhook_allow_private": True,  # the receivers listen on 127.0.0.1
    }


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, "tok-hivejob1": {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


async def discovered(call: Any) -> bool:
    hosts = (await call("GET", "hosts")).body["hosts"]
    return bool(hosts and len(hosts[0]["gpus"]) == 4)


def events(receiver: Receiver, name: str) -> list[dict[str, Any]]:
    return [e for e in receiver.new_events if e["event"] == name]


async def test_reminders_when_a_reservation_starts_and_before_it_ends(
    api: Any, running_hive: Any
) -> None:
    alice = api("alice")
    await until(lambda: discovered(alice), timeout=20)
    with receiving(Receiver()) as hook:
        await add_hook(alice, hook, events=["reservation.starting", "reservation.ending"])
        start = running_hive.now() + timedelta(seconds=2)
        made = await alice(
            "POST", "reservations",
            {"title": "soon", "gpus": ["gpu1:2"], "start": iso(start), "duration": "10m"},
        )  # fmt: skip
        assert made.status == 201, made
        await hook.until(2, timeout=10)
        starting, ending = events(hook, "reservation.starting"), events(hook, "reservation.ending")
        assert len(starting) == len(ending) == 1
        assert starting[0]["data"]["reservation"]["id"] == made.body["id"]
        assert ending[0]["data"]["minutes_left"] == 10
        assert "ends soon" in ending[0]["text"] and "starts now" in starting[0]["text"]
        await asyncio.sleep(1.0)
        assert len(hook.new_events) == 2  # each once


@pytest.mark.parametrize("privacy", [{"public_violations": True}, {}], ids=["public", "private"])
async def test_job_events_and_violations(
    api: Any, running_hive: Any, sim_host: Any, privacy: dict[str, Any]
) -> None:
    """Site endpoints get what anyone may see: job summaries without private descriptions,
    and violations only with public_violations, then without PIDs (issue #27, finding 5)."""
    owner, bob, boss = api(OWNER), api("bob"), api("boss")
    await until(lambda: discovered(owner), timeout=20)
    with (
        receiving(Receiver()) as mine,
        receiving(Receiver()) as bobs,
        receiving(Receiver()) as site,
    ):
        await add_hook(owner, mine, events=["job.started", "job.succeeded", "job.failed",
                                            "violation"])  # fmt: skip
        await add_hook(bob, bobs, events=["job.started", "violation"])
        await add_hook(boss, site, events=["violation", "job.started"], site=True)
        good = await owner("POST", "jobs", {"name": "ok", "gpus": ["gpu1:0"], "start": True,
                                            "description": "private job note",
                                            "command": "sleep 1"})  # fmt: skip
        bad = await owner("POST", "jobs", {"name": "bad", "gpus": ["gpu1:1"],
                                           "command": "sleep 1; exit 3", "start": True})  # fmt: skip
        assert good.status == bad.status == 201, (good, bad)
        await mine.until(4, timeout=20)
        started = events(mine, "job.started")
        assert sorted(e["data"]["job"]["id"] for e in started) == sorted(
            [good.body["id"], bad.body["id"]]
        )
        (ok,) = events(mine, "job.succeeded")
        (failed,) = events(mine, "job.failed")
        assert ok["data"]["job"]["id"] == good.body["id"]
        assert failed["data"]["job"]["id"] == bad.body["id"] and "exit status 3" in failed["text"]
        assert "command" not in failed["data"]["job"]  # the summary, as others see jobs
        assert ok["data"]["job"]["description"] == "private job note"  # the owner's own view
        await site.until(2, timeout=10)
        assert sorted(e["data"]["job"]["id"] for e in events(site, "job.started")) == sorted(
            [good.body["id"], bad.body["id"]]
        )
        assert "private job note" not in str(site.requests)
        site.new_events.clear()

        # a violation: OWNER's process on the GPU bob holds now
        await book(bob, "held", ["gpu1:3"], running_hive.now())
        proc = sim_host.start_process([3], user=OWNER)
        try:
            await bobs.until(1, timeout=20)  # the holder's own endpoint
            await mine.until(5, timeout=10)  # the offender's own endpoint
            if privacy:
                await site.until(1, timeout=10)
        finally:
            proc.kill()
            proc.wait()
        (held,) = bobs.new_events
        assert held["event"] == "violation"
        data = held["data"]["violation"]
        assert data["kind"] == "foreign" and data["holder"] == "bob" and data["offender"] == OWNER
        assert data["gpu"] == "gpu1:3" and "commands" not in data
        assert data["pids"] == [proc.pid]  # the people involved see the PIDs
        assert events(bobs, "job.started") == []  # not bob's jobs
        if not privacy:  # others may not see others' violations: neither may a site endpoint
            await asyncio.sleep(1.0)
            assert site.new_events == []
            return
        (violation,) = site.new_events
        assert violation["id"] == held["id"]  # one event, one idempotency key
        brief = violation["data"]["violation"]
        assert (brief["kind"], brief["holder"], brief["offender"]) == ("foreign", "bob", OWNER)
        assert "pids" not in brief and "commands" not in brief


class _NoJobs:
    """A store whose jobs repository records which of its methods are reached."""

    def __init__(self, store: Any, reached: list[str]) -> None:
        self._store, self._reached = store, reached

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        return _Recorded(found, self._reached) if name == "jobs" else found


class _Recorded:
    def __init__(self, target: Any, reached: list[str]) -> None:
        self._target, self._reached = target, reached

    def __getattr__(self, name: str) -> Any:
        self._reached.append(name)
        return getattr(self._target, name)


async def test_a_sweep_reads_no_jobs(
    api: Any, running_hive: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher tells integrations which job changed and protection which violations it
    opened (issue #32 item 2): a sweep no longer has integrations list the running jobs' tasks
    and read each job to diff its status (the events themselves: the test above)."""
    owner = api(OWNER)
    await until(lambda: discovered(owner), timeout=20)
    made = await owner("POST", "jobs", {"name": "long", "gpus": ["gpu1:0"], "start": True,
                                        "command": "sleep 30"})  # fmt: skip
    assert made.status == 201, made
    reached: list[str] = []
    integrations = running_hive.integrations
    monkeypatch.setattr(integrations, "store", _NoJobs(integrations.store, reached))
    await running_hive.monitor.sampler.sweep()  # every listener, as the loop runs them
    assert "tasks" not in reached
    await owner("POST", f"jobs/{made.body['id']}/stop")
