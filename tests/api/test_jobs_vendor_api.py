"""A site that mixes NVIDIA and AMD hosts: a job asks for a vendor or a model through the REST
API, and the queue places it only on matching GPUs (real hosts of the stand-in, real jobs run
as a real user)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from jupyter_gpuhive.sim.inventory import preset
from tests.conftest import USERS
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run jobs as a user")

OWNER = "hivejob1"
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture
def sims(tmp_path: Path) -> dict[str, LocalSimHost]:
    ensure_user(OWNER)
    return {
        "nv1": LocalSimHost("nv1", tmp_path / "nv1", preset("a100x4", "nv1")),
        "am1": LocalSimHost("am1", tmp_path / "am1", preset("mi300x", "am1")),
    }


@pytest.fixture
def hive_config(sims: dict[str, LocalSimHost]) -> dict[str, Any]:
    hosts = []
    for name, sim in sims.items():
        env = sim.env({})
        entry = {"name": name, "transport": "local", "env": {k: env[k] for k in SIM_ENV}}
        hosts.append({**entry, "vendor": "amd"} if name == "am1" else entry)
    return {"hosts": hosts, "poll_interval": 0.3, "site_timezone": "UTC"}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, "tok-hivejob1": {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


async def _discovered(client: Any) -> Any:
    hosts = (await client("GET", "hosts")).body["hosts"]
    return hosts if len(hosts) == 2 and all(h["gpus"] for h in hosts) else None


def _queued(name: str, count: int, **choice: Any) -> dict[str, Any]:
    return {"name": name, "command": "sleep 60", "queued": True, "walltime": "10m",
            "options": {"gpu_count": count}, **choice}  # fmt: skip


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_job_asks_for_a_vendor_or_a_model_on_a_mixed_site(api, running_hive, sims):
    owner = api(OWNER)
    hosts = await until(lambda: _discovered(owner), timeout=20)
    assert {h["name"]: h["vendor"] for h in hosts} == {"nv1": "nvidia", "am1": "amd"}

    # Refusals: a sentence each, before anything is stored.
    unknown = await owner("POST", "jobs", _queued("u", 1, vendor="intel"))
    assert unknown.status == 422
    assert "intel" in unknown.message and "amd, nvidia" in unknown.message
    named = await owner("POST", "jobs", {"name": "n", "command": "true", "gpus": ["nv1:0"],
                                         "vendor": "amd"})  # fmt: skip
    assert named.status == 422
    assert "nv1:0 is an NVIDIA GPU" in named.message and "AMD GPUs" in named.message
    wrong_model = await owner(
        "POST", "jobs/preview", {"name": "m", "command": "true", "gpus": ["am1:0"], "model": "a100"}
    )
    assert wrong_model.status == 422 and 'name holds "a100"' in wrong_model.message
    too_many = await owner("POST", "jobs", _queued("t", 9, vendor="amd"))
    assert too_many.status == 422
    assert "9 AMD GPUs; there are only 8" in too_many.message
    twice = await owner(
        "POST",
        "jobs",
        {**_queued("d", 1, vendor="amd"), "options": {"gpu_count": 1, "vendor": "nvidia"}},
    )
    assert twice.status == 422 and "once" in twice.message

    # A named GPU that matches is accepted, the choice not kept (its template takes no such
    # option), and it previews with the host's own pinning.
    ok = await owner(
        "POST", "jobs/preview", {"name": "p", "command": "true", "gpus": ["am1:3"], "vendor": "AMD"}
    )
    assert ok.status == 200, ok
    assert "ROCR_VISIBLE_DEVICES" in ok.body["tasks"][0]["env"]

    # Count-only jobs land only on matching GPUs, while the other vendor's stand free.
    amd = await owner("POST", "jobs", _queued("a", 2, vendor="amd"))
    assert amd.status == 201, amd
    assert amd.body["options"]["vendor"] == "amd"
    a100 = await owner("POST", "jobs", _queued("b", 3, options={"gpu_count": 3, "model": "A100"}))
    assert a100.status == 201, a100
    # One GPU would fit most tightly on nv1's last free one: the model keeps it on am1.
    mi300 = await owner("POST", "jobs", _queued("c", 1, model="mi300x"))
    assert mi300.status == 201, mi300

    async def running(job_id: int) -> Any:
        job = (await owner("GET", f"jobs/{job_id}")).body
        return job if job["status"] == "running" else None

    try:
        placed = {name: await until(lambda j=j: running(j.body["id"]), timeout=20)
                  for name, j in (("amd", amd), ("a100", a100), ("mi300", mi300))}  # fmt: skip
    except TimeoutError:
        raise AssertionError((await owner("GET", "queue")).body) from None
    try:
        assert {t["host"] for t in placed["amd"]["tasks"]} == {"am1"}
        assert sum(len(t["gpu_indices"]) for t in placed["amd"]["tasks"]) == 2
        assert "ROCR_VISIBLE_DEVICES" in placed["amd"]["tasks"][0]["env"]
        assert {t["host"] for t in placed["a100"]["tasks"]} == {"nv1"}
        assert sum(len(t["gpu_indices"]) for t in placed["a100"]["tasks"]) == 3
        assert {t["host"] for t in placed["mi300"]["tasks"]} == {"am1"}
    finally:
        for job in (amd, a100, mi300):  # 409: it has ended already
            assert (await owner("POST", f"jobs/{job.body['id']}/stop")).status in (200, 409)
