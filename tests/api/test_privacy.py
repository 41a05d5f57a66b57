"""Privacy through the REST API: job definitions, write-only env values, descriptions, usage."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid
from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.privacy import MASK
from jupyter_gpuhive.sim.cluster import ensure_user
from tests.api.helpers import refused
from tests.conftest import USERS, Call, book, iso, soon

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run jobs as a user")
OWNER = "hivejob1"  # a real UNIX user (jobs run as their owner); plays alice's part for jobs
DEFINITION = ("command", "options", "variables", "sweep", "env", "workdir", "description")
TASK_DEFINITION = ("command", "env", "workdir", "session", "log_path", "last_error")


@pytest.fixture
def privacy() -> dict[str, Any]:
    """GpuHiveApp privacy traits of the server under test (parametrized per test)."""
    return {}


@pytest.fixture
def hive_config(hive_config: dict[str, Any], privacy: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, **privacy}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, "tok-hivejob1": {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


def secret(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


async def job_views(call: Call, job_id: int) -> dict[str, tuple[dict[str, Any], str]]:
    """The job as `call`'s user gets it from each of the four read paths, with the whole
    reply's text (to look for values anywhere in it)."""
    found = {}
    for name, path, params in (
        ("one", f"jobs/{job_id}", None),
        ("by_user", "jobs", {"user": OWNER}),
        ("all", "jobs", None),
        ("queue", "queue", None),
    ):
        reply = await call("GET", path, params=params)
        assert reply.status == 200, (path, reply)
        body = reply.body
        job = body if name == "one" else next(j for j in body["jobs"] if j["id"] == job_id)
        found[name] = (job, json.dumps(body, ensure_ascii=False))
    return found


def job_body(cmd: str, var: str, env: str) -> dict[str, Any]:
    return {
        "name": "private", "template": "plain", "description": f"about {var}",
        "gpus": ["gpu1:0", "gpu1:1"], "options": {"per_gpu": True},
        "command": f"python3 train.py --token {cmd} --lr {{lr}}", "variables": {"lr": var},
        "env": {"WANDB_API_KEY": env, "NCCL_DEBUG": "INFO"}, "queued": True, "walltime": "1h",
    }  # fmt: skip


@ROOT
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_others_see_a_summary_owner_and_admins_the_definition_nobody_env_values(api):
    ensure_user(OWNER)
    owner, bob, carol, boss = api(OWNER), api("bob"), api("carol"), api("boss")
    cmd, var, env = secret("cmd"), secret("var"), secret("env")
    created = await owner("POST", "jobs", job_body(cmd, var, env))
    assert created.status == 201, created
    job_id = created.body["id"]
    assert env not in json.dumps(created.body)  # even the reply to the creator masks it
    assert created.body["env"] == {"WANDB_API_KEY": MASK, "NCCL_DEBUG": MASK}

    for other in (bob, carol):
        for path, (job, text) in (await job_views(other, job_id)).items():
            for value in (cmd, var, env):
                assert value not in text, (path, value)
            assert not set(DEFINITION) & set(job), (path, sorted(job))
            assert job["detail"] is False
            # what the calendar, overview and queue views need is there
            assert (job["id"], job["name"], job["owner"], job["status"]) == (
                job_id, "private", OWNER, "pending")  # fmt: skip
            assert job["created_at"] and job["walltime_s"] == 3600 and job["queued"] is True
            assert len(job["gpus"]) == 2
            assert [(t["host"], t["gpu_indices"]) for t in job["tasks"]] == [
                ("gpu1", [0]), ("gpu1", [1])]  # fmt: skip
            for task in job["tasks"]:
                assert not set(TASK_DEFINITION) & set(task), (path, sorted(task))
            if path == "queue":
                assert "estimated_start" in job and "waiting_for" in job

    for viewer in (owner, boss):
        for path, (job, text) in (await job_views(viewer, job_id)).items():
            assert env not in text, path
            assert job["detail"] is True
            assert job["command"] == f"python3 train.py --token {cmd} --lr {{lr}}"
            assert job["variables"] == {"lr": var} and job["options"] == {"per_gpu": True}
            assert job["description"] == f"about {var}"
            assert job["env"] == {"WANDB_API_KEY": MASK, "NCCL_DEBUG": MASK}
            for task in job["tasks"]:
                assert task["command"] == f"python3 train.py --token {cmd} --lr {var}"
                assert task["env"]["WANDB_API_KEY"] == MASK
                assert task["env"]["CUDA_VISIBLE_DEVICES"].startswith("GPU-")  # gpuhive's own

    # The answers to actions are the actor's, through the same serializer.
    for verb in ("dequeue", "enqueue"):
        acted = await owner("POST", f"jobs/{job_id}/{verb}")
        assert acted.status == 200, acted
        assert acted.body["command"] and env not in json.dumps(acted.body)
    refused(await bob("POST", f"jobs/{job_id}/dequeue"), 403, OWNER)


@ROOT
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_job_runs_with_the_real_value_of_a_masked_env(api):
    ensure_user(OWNER)
    owner = api(OWNER)
    env = secret("env")
    digest = hashlib.sha256(env.encode()).hexdigest()
    show = "import hashlib,os; print('sha', hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest())"
    body = {"name": "uses-env", "gpus": ["gpu2:0"], "command": f'python3 -c "{show}"',
            "env": {"HF_TOKEN": env}, "start": True}  # fmt: skip
    preview = await owner("POST", "jobs/preview", body)  # the caller's own request: shown
    assert preview.body["tasks"][0]["env"]["HF_TOKEN"] == env

    started = await owner("POST", "jobs", body)
    assert started.status == 201, started
    job_id = started.body["id"]

    async def printed() -> str:
        async with asyncio.timeout(20):
            while True:
                log = await owner("GET", f"jobs/{job_id}/log", params={"task": 0})
                if "sha" in log.body.get("text", ""):
                    return str(log.body["text"])
                await asyncio.sleep(0.2)

    assert f"sha {digest}" in await printed()
    for path in (f"jobs/{job_id}", "jobs"):
        reply = await owner("GET", path)
        assert env not in json.dumps(reply.body), path
    assert (await owner("GET", f"jobs/{job_id}")).body["tasks"][0]["env"]["HF_TOKEN"] == MASK


@ROOT
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("privacy", [{"public_descriptions": True}])
async def test_public_descriptions_show_descriptions_but_never_definitions(api):
    ensure_user(OWNER)
    owner, bob = api(OWNER), api("bob")
    cmd, var, env = secret("cmd"), secret("var"), secret("env")
    created = await owner("POST", "jobs", job_body(cmd, var, env))
    assert created.status == 201, created
    for path, (job, text) in (await job_views(bob, created.body["id"])).items():
        assert job["description"] == f"about {var}", path
        assert "command" not in job and "variables" not in job and env not in text
    res = await book(api("alice"), "rn50", ["gpu3:0"], soon(2, days=3))
    await api("alice")("PATCH", f"reservations/{res.body['id']}", {"description": "ablation"})
    seen = await bob("GET", f"reservations/{res.body['id']}")
    assert seen.body["description"] == "ablation"


async def test_reservation_descriptions_are_for_the_owner_and_admins(api):
    alice, bob, carol, boss = api("alice"), api("bob"), api("carol"), api("boss")
    start = soon(5, days=4)
    made = await alice(
        "POST", "reservations",
        {"title": "rn50", "description": "grant X-17 deadline", "gpus": ["gpu2:1"],
         "start": iso(start), "duration": "2h"},
    )  # fmt: skip
    assert made.status == 201 and made.body["description"] == "grant X-17 deadline"
    rid = made.body["id"]
    window = {"start": iso(start - timedelta(hours=1)), "end": iso(start + timedelta(hours=3))}
    for other in (bob, carol):
        one = await other("GET", f"reservations/{rid}")
        listed = await other("GET", "reservations", params=window)
        [mine] = [r for r in listed.body["reservations"] if r["id"] == rid]
        for shown in (one.body, mine):
            assert (shown["title"], shown["owner"]) == ("rn50", "alice")  # the calendar's
            assert "description" not in shown
            assert "X-17" not in json.dumps(listed.body) + json.dumps(one.body)
    for viewer in (alice, boss):
        assert (await viewer("GET", f"reservations/{rid}")).body["description"] == (
            "grant X-17 deadline"
        )
    edited = await boss("PATCH", f"reservations/{rid}", {"description": "moved"})
    assert edited.status == 200 and edited.body["description"] == "moved"


async def test_usage_of_others_is_shown_only_in_aggregate(api):
    alice, bob, boss = api("alice"), api("bob"), api("boss")
    start = soon(3, days=5)
    mine = await book(alice, "a-run", ["gpu3:2", "gpu3:3"], start, "2h")
    theirs = await book(bob, "b-run", ["gpu3:2"], start + timedelta(hours=2), "1h")
    window = {"start": iso(start), "end": iso(start + timedelta(hours=4))}

    seen = (await bob("GET", "usage", params=window)).body
    assert [u["user"] for u in seen["by_user"]] == ["bob"]
    assert seen["by_user"][0]["reserved_gpu_hours"] == 1.0
    assert [r["id"] for r in seen["reservations"]] == [theirs.body["id"]]
    assert "alice" not in json.dumps(seen) and "a-run" not in json.dumps(seen)
    gpus = {g["gpu"]: g["reserved_hours"] for g in seen["by_gpu"]}
    assert gpus == {"gpu3:2": 3.0, "gpu3:3": 2.0}  # per GPU: everyone's, summed
    assert seen["total"]["reserved_gpu_hours"] == 5.0

    everything = (await boss("GET", "usage", params=window)).body
    assert {u["user"]: u["reserved_gpu_hours"] for u in everything["by_user"]} == {
        "alice": 4.0, "bob": 1.0}  # fmt: skip
    assert len(everything["reservations"]) == 2 and everything["total"] == seen["total"]

    rid = mine.body["id"]
    refused(await bob("GET", f"reservations/{rid}/usage"), 403, "alice", "admins")
    for viewer in (alice, boss):
        usage = await viewer("GET", f"reservations/{rid}/usage")
        assert usage.status == 200 and usage.body["reserved_gpu_hours"] == 4.0
    assert (await bob("GET", "reservations/99999/usage")).status == 404


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("privacy", [{"public_usage": True}])
async def test_public_usage_shows_everyone_rows(api):
    alice, bob = api("alice"), api("bob")
    start = soon(3, days=6)
    mine = await book(alice, "a-run", ["gpu1:2"], start, "2h")
    window = {"start": iso(start), "end": iso(start + timedelta(hours=2))}
    seen = (await bob("GET", "usage", params=window)).body
    assert [(u["user"], u["reserved_gpu_hours"]) for u in seen["by_user"]] == [("alice", 2.0)]
    assert [r["title"] for r in seen["reservations"]] == ["a-run"]
    assert seen["total"] == {"reserved_gpu_hours": 2.0, "used_gpu_hours": 0.0}
    usage = await bob("GET", f"reservations/{mine.body['id']}/usage")
    assert usage.status == 200 and usage.body["reserved_gpu_hours"] == 2.0
