"""Before accepting a job, gpuhive checks it can log in as the owner on the job's hosts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import SshdCluster, ensure_user
from tests.conftest import USERS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for sshd and users")

OWNER = "hivejob1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SshdCluster]:
    ensure_user(OWNER)
    with SshdCluster(["gpu1"]) as running:
        running.add_user(OWNER)
        yield running


@pytest.fixture
def hive_config(cluster: SshdCluster) -> dict[str, Any]:
    host = cluster["gpu1"]
    return {
        "hosts": [{"name": "gpu1", "address": host.address, "port": host.port,
                   "user": "root", "gpu_count": 2}],
        "ssh_key": str(cluster.client_key),
        "known_hosts": [str(cluster.known_hosts)],
        "monitor": False,
        "site_timezone": "UTC",
    }  # fmt: skip


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, "tok-hivejob1": {"name": OWNER}, "tok-ghost": {"name": "ghostusr"}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_job_needs_a_working_login_as_its_owner(api: Any, cluster: SshdCluster) -> None:
    owner, ghost = api(OWNER), api("ghostusr")
    mine = await owner("GET", "me/ssh")
    assert mine.status == 200
    assert mine.body["hosts"] == {"gpu1": None}
    assert mine.body["public_key"].startswith("ssh-ed25519 ")

    theirs = await ghost("GET", "me/ssh")
    assert "authorized_keys" in theirs.body["hosts"]["gpu1"]

    body = {"name": "x", "gpus": ["gpu1:0"], "command": "true"}
    refused = await ghost("POST", "jobs", body)
    assert refused.status == 409
    assert "cannot run jobs as ghostusr" in refused.message
    assert "authorized_keys" in refused.message
    assert (await ghost("GET", "jobs")).body["jobs"] == []

    accepted = await owner("POST", "jobs", body)
    assert accepted.status == 201, accepted
