"""Through the server (#29): alice's container job runs on her reserved GPU as hers, and bob,
a real UNIX user who may use the engine, starts a container there with her uid and a copy of
her job's labels. GET hosts names both containers and their owners; the violation is bob's
container's (blamed on root: no site label is trusted), names it, and the kill step removes it
while her job runs on."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.model import UTC
from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from tests.conftest import USERS, iso
from tests.support.engine_access import as_user, engine_user
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")

OWNER, BOB = "hivecat1", "hivecat2"  # alice and bob (UNIX names; `ps` shows 8 characters)
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture
def sim_host(tmp_path: Path, docker_engine: Any) -> LocalSimHost:
    engine_user(docker_engine, OWNER, BOB)
    return LocalSimHost("gpu1", tmp_path / "sim")


@pytest.fixture
def hive_config(sim_host: LocalSimHost, docker_engine: Any, container_image: Any) -> dict[str, Any]:
    env = sim_host.env()
    containers = {
        "engine": "docker", "binary": docker_engine.binary, "socket": docker_engine.host,
        "gpu_flags": "none", "images": ["gpuhive-test/python:*"],
    }  # fmt: skip
    host = {"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}
    return {
        "hosts": [{**host, "containers": containers}], "poll_interval": 0.3,
        "site_timezone": "UTC", "admin_groups": ["admins"], "protection_level": 1,
        "violation_handlers": {"kill": {"mode": "user"}},
        "violation_ladder": [{"after": 1, "handler": "kill", "signal": "KILL"}],
    }  # fmt: skip


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, **{f"tok-{u}": {"name": u, "groups": []} for u in (OWNER, BOB)}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_bobs_container_on_alices_gpu_is_his_violation_and_is_removed(
    api, running_hive, sim_host, docker, container_image
) -> None:
    alice = api(OWNER)

    async def discovered() -> Any:
        hosts = (await alice("GET", "hosts")).body["hosts"]
        return hosts and len(hosts[0]["gpus"]) == 4

    await until(discovered, timeout=15)
    booked = await alice("POST", "reservations", {"title": "run", "gpus": ["gpu1:1"],
                                                  "start": iso(datetime.now(UTC)), "duration": "1h"})  # fmt: skip
    assert booked.status == 201, booked
    job = await alice("POST", "jobs", {
        "name": "boxed", "gpus": ["gpu1:1"], "image": container_image.tag,
        "command": "sleep 300", "start": True,
    })  # fmt: skip
    assert job.status == 201, job
    session = job.body["tasks"][0]["session"]

    uid = ensure_user(OWNER).pw_uid
    labels = ["--label", "gpuhive=1", "--label", f"gpuhive.owner={OWNER}",
              "--label", f"gpuhive.job={job.body['id']}"]  # fmt: skip
    bobs = as_user(docker, BOB, "run", "-d", "--name", "bobs-copy", "--network", "none",
                  "--user", f"{uid}:{uid}", "--restart", "always", *labels,
                  "--env", "GPUHIVE_SIM_HOST=gpu1", "--env", "CUDA_VISIBLE_DEVICES=1",
                  container_image.tag, "sleep", "300")  # fmt: skip

    async def both() -> Any:
        gpus = (await alice("GET", "hosts")).body["hosts"][0]["gpus"]
        procs = [p for p in gpus[1]["processes"] if p.get("container")]
        names = sorted(str(p["container"]["name"]) for p in procs)
        return procs if names == sorted(["bobs-copy", session]) else None

    seen = {p["container"]["name"]: p for p in await until(both, timeout=30)}
    assert (seen[session]["user"], seen[session]["container"]["source"]) == (OWNER, "gpuhive")
    copy = seen["bobs-copy"]
    assert (copy["user"], copy["container"]["source"]) == ("root", "unattributed")
    assert copy["container"]["process_user"] == OWNER and copy["container"]["id"] == bobs

    async def violations() -> Any:
        reply = await api("boss")("GET", "violations", params={"reservation": booked.body["id"]})
        found = reply.body["violations"]
        return found if found and found[0]["actions"] else None

    (violation,) = await until(violations, timeout=30)
    assert (violation["offender"], violation["holder"], violation["kind"]) == (
        "root",
        OWNER,
        "foreign",
    )
    assert violation["pids"] == [copy["pid"]]
    assert "bobs-copy" in violation["detail"] and bobs[:12] in violation["detail"]
    assert "stopped and removed" in violation["actions"][0]["detail"]
    assert docker.run("ps", "-aq", "--filter", "name=^bobs-copy$").stdout.strip() == ""
    assert docker.run("ps", "-q", "--filter", f"name=^{session}$").stdout.strip()  # hers runs on
    stopped = await alice("POST", f"jobs/{job.body['id']}/stop")
    assert stopped.status == 200, stopped
