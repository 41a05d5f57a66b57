"""Live monitoring through the REST API: simulated local hosts, real processes, real owners."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from tests.conftest import book
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(
    __import__("os").geteuid() != 0, reason="needs root to run processes as test users"
)

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture
def sim_hosts(tmp_path: Path) -> list[LocalSimHost]:
    return [LocalSimHost(f"gpu{i}", tmp_path / f"sim{i}") for i in (1, 2)]


@pytest.fixture
def hive_config(sim_hosts: list[LocalSimHost]) -> dict[str, Any]:
    hosts = []
    for host in sim_hosts:
        env = host.env()
        hosts.append(
            {"name": host.name, "transport": "local",
             "env": {k: env[k] for k in SIM_ENV}}
        )  # fmt: skip
    return {
        "hosts": hosts,
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
    }


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_hosts_show_processes_owners_and_holders(api, running_hive, sim_hosts):
    ensure_user("gh-alice")
    alice = api("alice")
    # Discovery replaces the configured (empty) inventory with the simulated GPUs.
    hosts = await until(
        lambda: _hosts_with_gpus(alice),
    )
    assert {h["name"] for h in hosts} == {"gpu1", "gpu2"}
    gpu1 = next(h for h in hosts if h["name"] == "gpu1")
    assert gpu1["state"] == "up"
    assert len(gpu1["gpus"]) == 4
    assert gpu1["gpus"][0]["uuid"] == sim_hosts[0].config.gpus[0].uuid
    # the stand-in's A100s print no fan speed: not reported, with why, never 0
    assert gpu1["gpus"][0]["not_reported"] == {"fan.speed": "not available on this GPU"}

    now = running_hive.now()
    booked = await book(alice, "live", ["gpu1:1"], now)

    proc = sim_hosts[0].start_process([1], user="gh-alice", mem_mib=2048, util=80)
    try:

        async def seen() -> Any:
            state = await alice("GET", "hosts")
            gpu = state.body["hosts"][0]["gpus"][1]
            return gpu if any(p["pid"] == proc.pid for p in gpu["processes"]) else None

        gpu = await until(seen)
        [mine] = [p for p in gpu["processes"] if p["pid"] == proc.pid]
        assert mine["user"] == "gh-alice"
        assert gpu["util"] == 80
        assert gpu["reservation"]["owner"] == "alice"
        assert gpu["reservation"]["id"] == booked.body["id"]
        assert gpu["next_reservation"] is None
        # A booking made between two sweeps shows at once (only the live part waits for one).
        later = await book(alice, "later", ["gpu1:2"], now + timedelta(hours=3))
        state = (await alice("GET", "hosts")).body["hosts"][0]["gpus"]
        assert state[2]["reservation"] is None
        assert state[2]["next_reservation"]["id"] == later.body["id"]
        assert state[1]["reservation"]["id"] == booked.body["id"]
        # One after that changes nothing shown; one before it, and its cancel, show at once.
        await book(alice, "after", ["gpu1:2"], now + timedelta(hours=6))
        sooner = await book(alice, "sooner", ["gpu1:2"], now + timedelta(hours=1))
        state = (await alice("GET", "hosts")).body["hosts"][0]["gpus"]
        assert state[2]["next_reservation"]["id"] == sooner.body["id"]
        assert (await alice("DELETE", f"reservations/{sooner.body['id']}")).status == 200
        state = (await alice("GET", "hosts")).body["hosts"][0]["gpus"]
        assert state[2]["next_reservation"]["id"] == later.body["id"]

        metrics = await alice("GET", "metrics", params={"gpu": "gpu1:1"})
        assert metrics.status == 200
        points = metrics.body["gpus"]["gpu1:1"]["points"]
        assert points and points[-1][1] == 80

        async def used() -> Any:
            usage = await alice("GET", f"reservations/{booked.body['id']}/usage")
            return usage.body if usage.body["used_gpu_hours"] > 0 else None

        usage = await until(used)
        assert usage["gpus"][0]["max_util"] == 80
        assert usage["reserved_gpu_hours"] == 1.0

        window = await api("boss")("GET", "usage")  # an admin sees every user's rows
        assert window.status == 200
        users = {u["user"]: u for u in window.body["by_user"]}
        assert users["gh-alice"]["used_gpu_hours"] > 0
        assert users["alice"]["reserved_gpu_hours"] > 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_broken_host_is_reported_and_others_carry_on(api, running_hive, sim_hosts):
    alice = api("alice")
    sim_hosts[1].set_fault(driver_failure=True)
    await until(lambda: _hosts_with_gpus(alice, want=1))
    state = (await alice("GET", "hosts")).body["hosts"]
    broken = next(h for h in state if h["name"] == "gpu2")
    assert "nvidia-smi" in (broken["gpu_error"] or "")
    healthy = next(h for h in state if h["name"] == "gpu1")
    assert healthy["gpu_error"] is None and healthy["gpus"][0]["util"] is not None
    bad = await alice("GET", "metrics", params={"gpu": "gpu9:0"})
    assert bad.status == 422 and "gpu9:0" in bad.message


async def _hosts_with_gpus(client: Any, want: int = 2) -> Any:
    reply = await client("GET", "hosts")
    hosts = reply.body["hosts"]
    ready = [h for h in hosts if h["gpus"] and h["gpus"][0]["util"] is not None]
    return hosts if len(ready) >= want else None


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_foreign_process_reaches_the_event_bus_and_the_history(
    api, jp_serverapp, running_hive, sim_hosts
):
    from jupyter_gpuhive.protection.handlers import EVENT_SCHEMA_ID

    ensure_user("gh-bob")
    alice = api("alice")
    await until(lambda: _hosts_with_gpus(alice))
    seen: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(data)

    jp_serverapp.event_logger.add_listener(schema_id=EVENT_SCHEMA_ID, listener=listener)
    now = running_hive.now()
    booked = await book(alice, "mine", ["gpu1:3"], now)
    intruder = sim_hosts[0].start_process([3], user="gh-bob", mem_mib=1000, util=50)
    try:

        async def told() -> Any:
            return [e for e in seen if e.get("offender") == "gh-bob"]

        events = await until(told)
        assert events[0]["holder"] == "alice"
        assert events[0]["gpu"] == "gpu1:3"
        assert str(intruder.pid) in str(events[0]["pids"])
        # Anyone on the server may subscribe to the bus: no command line goes there.
        assert "commands" not in events[0] and "sleep" not in json.dumps(events[0])

        async def recorded() -> Any:
            reply = await alice("GET", "violations")
            found = [v for v in reply.body["violations"] if v["offender"] == "gh-bob"]
            return found if found and found[0]["actions"] else None

        [violation] = await until(recorded)
        assert violation["reservation"] == booked.body["id"]
        assert violation["kind"] == "foreign"
        usage = await alice("GET", f"reservations/{booked.body['id']}/usage")
        assert [v["offender"] for v in usage.body["violations"]] == ["gh-bob"]
    finally:
        intruder.kill()
        intruder.wait()
