"""Jobs through the REST API: real screen sessions on simulated local hosts, as a real user."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from tests.conftest import USERS, book
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run jobs as a user")

OWNER = "hivejob1"  # a real UNIX user; the gpuhive user of the same name owns the jobs
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture
def sim_host(tmp_path: Path) -> LocalSimHost:
    ensure_user(OWNER)
    return LocalSimHost("gpu1", tmp_path / "sim")


@pytest.fixture
def hive_config(sim_host: LocalSimHost) -> dict[str, Any]:
    env = sim_host.env()
    return {
        "hosts": [{"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
    }


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, "tok-hivejob1": {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_job_runs_as_owner_logs_and_stops(api, running_hive, sim_host):
    owner, bob = api(OWNER), api("bob")
    await until(lambda: _discovered(owner), timeout=15)
    templates = await owner("GET", "templates")
    assert {t["name"] for t in templates.body["templates"]} >= {"plain", "pytorch", "tensorflow"}

    body = {
        "name": "hello",
        "template": "plain",
        "gpus": ["gpu1:0"],
        "command": 'python3 -u -c \'import os,sys,time; print("seen", sys.argv[1], '
        'os.environ["CUDA_VISIBLE_DEVICES"]); time.sleep(60)\' {word}',
        "variables": {"word": "it's $(not) run"},
    }
    preview = await owner("POST", "jobs/preview", body)
    assert preview.status == 200, preview
    [task] = preview.body["tasks"]
    uuid = sim_host.config.gpus[0].uuid
    assert task["env"]["CUDA_VISIBLE_DEVICES"] == uuid
    assert task["gpus"] == ["gpu1:0"]

    created = await owner("POST", "jobs", {**body, "start": True})
    assert created.status == 201, created
    job_id = created.body["id"]
    assert created.body["owner"] == OWNER
    assert created.body["status"] in ("starting", "running")

    async def on_gpu() -> Any:
        hosts = (await owner("GET", "hosts")).body["hosts"]
        procs = hosts[0]["gpus"][0]["processes"]
        return [p for p in procs if p["user"] == OWNER]

    procs = await until(on_gpu, timeout=15)
    assert "python3" in procs[0]["command"]

    async def logged() -> Any:
        reply = await owner("GET", f"jobs/{job_id}/log", params={"task": 0})
        return reply.body if "seen" in reply.body.get("text", "") else None

    log = await until(logged, timeout=15)
    assert f"seen it's $(not) run {uuid}" in log["text"]
    assert "screen -x" in log["attach"]

    refused = await bob("POST", f"jobs/{job_id}/stop")
    assert refused.status == 403
    assert OWNER in refused.message

    stopped = await owner("POST", f"jobs/{job_id}/stop")
    assert stopped.status == 200, stopped
    assert stopped.body["status"] == "stopped"
    again = await owner("POST", f"jobs/{job_id}/stop")
    assert again.status == 409

    # Someone else's reservation on gpu1:1 now: starting there is refused, nothing stored.
    now = running_hive.now()
    await book(bob, "mine", ["gpu1:1"], now)
    before = len((await owner("GET", "jobs")).body["jobs"])
    clash = await owner("POST", "jobs", {**body, "gpus": ["gpu1:1"], "start": True})
    assert clash.status == 409
    assert "bob" in clash.message
    assert len((await owner("GET", "jobs")).body["jobs"]) == before


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_bad_job_requests_are_refused_in_words(api, running_hive):
    owner = api(OWNER)
    await until(lambda: _discovered(owner), timeout=15)
    base = {"name": "x", "gpus": ["gpu1:0"], "command": "echo {a}", "variables": {"a": "1"}}
    cases = [
        ({**base, "template": "caffe"}, 422, "caffe"),
        ({**base, "command": ""}, 422, "command"),
        ({**base, "gpus": ["gpu9:0"]}, 422, "gpu9:0"),
        ({**base, "command": "echo {missing}"}, 422, "missing"),
        ({**base, "sweep": ["lr"]}, 422, "sweep"),
        ({**base, "max_retries": 99}, 422, "max_retries"),
        ({**base, "reservation": 12345, "gpus": []}, 404, "12345"),
    ]
    for body, status, word in cases:
        reply = await owner("POST", "jobs", body)
        assert reply.status == status, (body, reply)
        assert word in reply.message, reply.message
    assert (await owner("GET", "jobs")).body["jobs"] == []
    assert (await owner("GET", "jobs/77")).status == 404
    assert (await owner("POST", "jobs/abc/start")).status == 404


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
async def test_the_jobs_list_is_the_newest_jobs_and_every_job_running_now(api, running_hive):
    """GET jobs grew with the site's history (every job ever, polled by every sidebar): it
    holds the newest `limit` jobs and every job running now, and says when it left some out."""
    owner = api(OWNER)
    await until(lambda: _discovered(owner), timeout=15)
    base = {"template": "plain", "gpus": ["gpu1:0"], "start": True}
    old = await owner("POST", "jobs", {**base, "name": "long", "command": "sleep 60"})
    assert old.status == 201, old
    quick = []
    for n in range(4):
        made = await owner("POST", "jobs", {**base, "name": f"q{n}", "gpus": [f"gpu1:{1 + n % 3}"],
                                            "command": "true"})  # fmt: skip
        assert made.status == 201, made
        quick.append(made.body["id"])

    async def over() -> Any:
        jobs = (await owner("GET", "jobs")).body["jobs"]
        done = [j for j in jobs if j["id"] in quick and j["status"] == "succeeded"]
        return len(done) == len(quick)

    await until(over, timeout=30, what="the four quick jobs to end")
    listed = await owner("GET", "jobs", params={"limit": "2"})
    assert listed.status == 200, listed
    ids = [j["id"] for j in listed.body["jobs"]]
    assert ids == [old.body["id"], *quick[-2:]]  # the running one besides the newest two
    assert listed.body["more"] is True
    everything = await owner("GET", "jobs")
    assert [j["id"] for j in everything.body["jobs"]] == [old.body["id"], *quick]
    assert everything.body["more"] is False
    mine = await owner("GET", "jobs", params={"limit": "1", "user": OWNER, "status": "running"})
    assert [j["id"] for j in mine.body["jobs"]] == [old.body["id"]]
    for bad in ("0", "-3", "ten", "10001"):
        refused = await owner("GET", "jobs", params={"limit": bad})
        assert refused.status in (400, 422), (bad, refused)
        assert "limit" in refused.message, refused.message
    assert (await owner("POST", f"jobs/{old.body['id']}/stop")).status == 200


async def test_a_retried_job_submission_is_made_once(api, running_hive):
    """A job submission reaches hosts (its login check; with `start`, its launch): a retry
    with the same Idempotency-Key is answered from the key before any of that runs."""
    owner = api(OWNER)
    await until(lambda: _discovered(owner), timeout=15)
    body = {"template": "plain", "name": "once", "gpus": ["gpu1:2"], "command": "true"}
    key = {"Idempotency-Key": "job-once-7f3a"}
    first = await owner("POST", "jobs", body, headers=key)
    assert first.status == 201, first
    again = await owner("POST", "jobs", body, headers=key)
    assert again.status == 201 and again.body == first.body, again
    other = await owner("POST", "jobs", {**body, "name": "twice"}, headers=key)
    assert other.status == 422 and "different request" in other.message, other
    names = [j["name"] for j in (await owner("GET", "jobs")).body["jobs"]]
    assert names.count("once") == 1 and "twice" not in names, names


async def _discovered(client: Any) -> Any:
    hosts = (await client("GET", "hosts")).body["hosts"]
    return hosts if hosts and len(hosts[0]["gpus"]) == 4 else None


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_queued_jobs_run_in_free_time_through_the_api(api, running_hive):
    owner = api(OWNER)
    await until(lambda: _discovered(owner), timeout=15)
    body = {"name": "q", "gpus": ["gpu1:2"], "command": "sleep 30", "queued": True,
            "walltime": "10m"}  # fmt: skip
    queued = await owner("POST", "jobs", body)
    assert queued.status == 201, queued

    async def running() -> Any:
        job = (await owner("GET", f"jobs/{queued.body['id']}")).body
        return job if job["status"] == "running" else None

    await until(running, timeout=15)
    # A count-only job must be queued, and is placed when GPUs are free.
    refused = await owner(
        "POST", "jobs", {"name": "c", "command": "sleep 30", "options": {"gpu_count": 2}}
    )
    assert refused.status == 422
    assert "queued" in refused.message
    counted = await owner(
        "POST", "jobs", {"name": "c", "command": "sleep 30", "options": {"gpu_count": 2},
                         "queued": True, "walltime": "10m"}
    )  # fmt: skip
    assert counted.status == 201, counted
    assert counted.body["tasks"] == []

    async def placed() -> Any:
        job = (await owner("GET", f"jobs/{counted.body['id']}")).body
        return job if job["status"] == "running" else None

    try:
        job = await until(placed, timeout=15)
    except TimeoutError:
        raise AssertionError((await owner("GET", "queue")).body) from None
    assert len(job["gpus"]) == 2
    assert "gpu1:2" not in [
        t["host"] + ":" + str(i) for t in job["tasks"] for i in t["gpu_indices"]
    ]
    listing = await owner("GET", "queue")
    assert listing.status == 200
    for job_id in (queued.body["id"], counted.body["id"]):
        assert (await owner("POST", f"jobs/{job_id}/stop")).status == 200
