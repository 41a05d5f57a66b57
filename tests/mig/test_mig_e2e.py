"""End to end on a simulated host with MIG on: a slice is booked, a job runs on it with the
slice's MIG UUID, another user's process on that slice is caught, one on the neighbouring slice
(held by its own user) is not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from tests.conftest import USERS, book
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as test users")

OWNER = "hivemig1"  # a real UNIX user; the gpuhive user of the same name
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
UNIX = {"bob": "gh-bob", "carol": "gh-carol"}


@pytest.fixture
def sim_host(tmp_path: Path) -> LocalSimHost:
    for user in (OWNER, *UNIX.values()):
        ensure_user(user)
    return LocalSimHost("mig1", tmp_path / "sim", profile="mig")


@pytest.fixture
def hive_config(sim_host: LocalSimHost) -> dict[str, Any]:
    env = sim_host.env()
    return {
        "hosts": [{"name": "mig1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
        "unix_users": UNIX,
        "protection_level": 1,
    }


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, "tok-hivemig1": {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


async def _slices(client: Any) -> Any:
    hosts = (await client("GET", "hosts")).body["hosts"]
    return hosts and hosts[0]["gpus"] and hosts[0]["gpus"][0]["slices"]


async def _violations(client: Any) -> list[dict[str, Any]]:
    reply = await client("GET", "violations")
    assert reply.status == 200, reply
    return list(reply.body["violations"])


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_job_on_a_slice_and_protection_per_slice(
    api, running_hive, sim_host, gpu_processes
):
    owner, carol, boss = api(OWNER), api("carol"), api("boss")
    migs = sim_host.config.gpus[0].mig  # 3g.40gb GI 1, 2g.20gb GI 5, 1g.10gb GI 13
    slices = await until(lambda: _slices(owner), timeout=20)
    assert [s["id"] for s in slices] == ["mig1:0/mig1", "mig1:0/mig5", "mig1:0/mig13"]
    assert [s["uuid"] for s in slices] == [m.uuid for m in migs]
    assert slices[1]["profile"] == "2g.20gb" and slices[1]["memory_mib"] == 19968
    assert slices[1]["util"] is None and slices[1]["util_label"] == "not reported"

    now = running_hive.now()
    mine = await book(owner, "slice", ["mig1:0/mig5"], now, "2h")
    assert mine.body["gpus"] == ["mig1:0/mig5"] and mine.body["gpu_uuids"] == [migs[1].uuid]
    await book(carol, "neighbour", ["mig1:0/mig13"], now, "2h")

    # The job on the reservation sees the slice's MIG UUID, and runs on that slice.
    body = {
        "name": "on-slice",
        "template": "plain",
        "reservation": mine.body["id"],
        "command": 'python3 -u -c \'import os,time; print("cvd", '
        'os.environ["CUDA_VISIBLE_DEVICES"]); time.sleep(120)\'',
    }
    preview = await owner("POST", "jobs/preview", body)
    assert preview.status == 200, preview
    assert preview.body["tasks"][0]["env"]["CUDA_VISIBLE_DEVICES"] == migs[1].uuid
    created = await owner("POST", "jobs", {**body, "start": True})
    assert created.status == 201, created
    job_id = created.body["id"]

    async def on_slice() -> Any:
        found = await _slices(owner)
        return found and [p for p in found[1]["processes"] if p["user"] == OWNER]

    [job_proc] = await until(on_slice, timeout=20)
    assert job_proc["slice"] == "mig1:0/mig5"
    # the slice's time series: its memory, and no utilisation (null, not 0)
    metrics = await owner("GET", "metrics", params={"gpu": "mig1:0/mig5"})
    assert metrics.status == 200, metrics
    series = metrics.body["gpus"]["mig1:0/mig5"]
    assert series["uuid"] == migs[1].uuid and series["points"]
    assert all(p[1] is None for p in series["points"])
    assert max(p[2] or 0 for p in series["points"]) > 0

    # carol on her own (neighbouring) slice, bob on the owner's slice.
    neighbour = sim_host.start_process([migs[2].uuid], user="gh-carol", mem_mib=500, util=20)
    gpu_processes.append(neighbour)
    intruder = sim_host.start_process([migs[1].uuid], user="gh-bob", mem_mib=700, util=30)
    gpu_processes.append(intruder)

    caught = await until(lambda: _caught(boss, intruder.pid), timeout=20)
    assert caught["gpu"] == "mig1:0/mig5" and caught["holder"] == OWNER
    assert caught["offender"] == "gh-bob"
    # several more sweeps: still nothing about carol on the neighbouring slice
    hosts = await until(lambda: _seen(owner, neighbour.pid), timeout=20)
    assert hosts["slice"] == "mig1:0/mig13"
    found = await _violations(boss)
    assert not [v for v in found if neighbour.pid in v["pids"]], found
    assert {v["gpu"] for v in found} == {"mig1:0/mig5"}
    stopped = await owner("POST", f"jobs/{job_id}/stop")
    assert stopped.status == 200, stopped


async def _caught(client: Any, pid: int) -> Any:
    found = [v for v in await _violations(client) if pid in v["pids"]]
    return found[0] if found else None


async def _seen(client: Any, pid: int) -> Any:
    hosts = (await client("GET", "hosts")).body["hosts"]
    for part in hosts[0]["gpus"][0]["slices"]:
        for proc in part["processes"]:
            if proc["pid"] == pid:
                return proc
    return None
