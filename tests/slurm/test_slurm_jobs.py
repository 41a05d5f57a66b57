"""Jobs on a real Slurm cluster through the REST API (issue #47, item 3): a job on a Slurm
booking is a batch job of its owner's UNIX account in the booking's reservation, with the
booked GPUs as its gres; its state, log and stop come from Slurm; a job Slurm ends says why;
other users cannot stop it, and a job cannot reach GPUs its owner does not hold."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jupyter_gpuhive.hosts.slurm import SlurmParseError
from jupyter_gpuhive.hosts.slurmjobs import parse_jobs
from jupyter_gpuhive.model.engines import engine_name
from tests.conftest import iso
from tests.slurm.conftest import ACCOUNTS, slurm_hosts
from tests.slurm.test_slurm_api import WHOLE_N1, inventory
from tests.support.slurm import SlurmCluster
from tests.support.waiting import until


@pytest.fixture
def hive_config(hive_config: dict[str, Any], slurm: SlurmCluster) -> dict[str, Any]:
    return {**hive_config, "hosts": slurm_hosts(slurm), "unix_users": ACCOUNTS,
            "poll_interval": 0.5}  # fmt: skip


def slurm_jobs(slurm: SlurmCluster) -> dict[str, dict[str, str]]:
    """Every job Slurm knows (ended ones too), by job id: name, user, state, reservation."""
    done = subprocess.run(
        [f"{slurm.bin}/squeue", "-h", "-t", "all", "-o", "%i|%j|%u|%T|%v"], env=slurm.env,
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    out = {}
    for line in done.stdout.splitlines():
        job_id, name, user, state, reservation = line.split("|")
        out[job_id] = {"name": name, "user": user, "state": state, "reservation": reservation}
    return out


def newest(slurm: SlurmCluster, name: str) -> tuple[str, dict[str, str]]:
    """The newest Slurm job of that name (job ids of gpuhive start again in each test)."""
    found = [(int(k), k, j) for k, j in slurm_jobs(slurm).items() if j["name"] == name]
    assert found, f"Slurm lists no job {name}"
    _, job_id, job = max(found)
    return job_id, job


@pytest.fixture(autouse=True)
def no_jobs_left(slurm: SlurmCluster) -> Iterator[None]:
    """Every job of the test's accounts cancelled after the test."""
    yield
    for account in ACCOUNTS.values():
        subprocess.run([f"{slurm.bin}/scancel", "-u", account], env=slurm.env, check=False,
                       timeout=30)  # fmt: skip


async def bobs_job(slurm: SlurmCluster, node: str, gpus: int) -> str:
    """A Slurm job of bob's submitted outside gpuhive (10 minutes at most), once it runs."""
    sbatch = ["runuser", "-u", ACCOUNTS["bob"], "--", f"{slurm.bin}/sbatch", "--parsable",
              f"--nodelist={node}", f"--gres=gpu:{gpus}", "--time=10", "--output=/dev/null",
              "--wrap=sleep 300"]  # fmt: skip
    submitted = subprocess.run(sbatch, env=slurm.env, capture_output=True, text=True,
                               check=True, timeout=30)  # fmt: skip
    job_id = submitted.stdout.strip().split(";")[0]

    def running() -> bool:
        return slurm_jobs(slurm).get(job_id, {}).get("state") == "RUNNING"

    await until(running, 60, "bob's Slurm job running")
    return job_id


async def booked_now(call: Any, gpus: list[str]) -> int:
    made = await call("POST", "reservations", {"title": "now", "gpus": gpus,
                                               "start": iso(datetime.now(UTC)),
                                               "duration": "1h"})  # fmt: skip
    assert made.status == 201, made
    rid: int = made.body["id"]
    return rid


async def job_state(call: Any, job_id: int, *states: str) -> dict[str, Any] | None:
    job = await call("GET", f"jobs/{job_id}")
    task = job.body["tasks"][0]
    return job.body if task["state"] in states else None


async def test_a_job_on_a_slurm_booking_is_its_owners_batch_job(api, running_hive, slurm) -> None:
    alice = api("alice")
    await inventory(alice)
    rid = await booked_now(alice, WHOLE_N1)
    command = ('echo "job $SLURM_JOB_ID as $(id -un) in $SLURM_JOB_RESERVATION"; '
               'echo "gpus=$CUDA_VISIBLE_DEVICES"')  # fmt: skip
    made = await alice("POST", "jobs", {"name": "hello", "command": command,
                                        "reservation": rid, "start": True})  # fmt: skip
    assert made.status == 201, made
    job_id = made.body["id"]
    done = await until(lambda: job_state(alice, job_id, "succeeded", "failed", "lost"), 60,
                       "the Slurm job ended")  # fmt: skip
    task = done["tasks"][0]
    assert task["state"] == "succeeded", task
    slurm_id, seen = newest(slurm, task["session"])
    assert seen["user"] == ACCOUNTS["alice"]  # submitted as the owner's account
    assert seen["reservation"] == engine_name(rid)
    log = await alice("GET", f"jobs/{job_id}/log", params={"task": 0})
    assert log.status == 200, log
    said = log.body["text"]
    assert f"job {slurm_id} as {ACCOUNTS['alice']} in {engine_name(rid)}" in said
    # Slurm pinned the four booked GPUs (its own indexes, not gpuhive's UUIDs)
    assert "gpus=0,1,2,3" in said, said


async def test_templates_run_as_slurm_jobs(api, running_hive, slurm) -> None:
    """PyTorch (one env:// process per GPU: four batch jobs of one GPU each in the booking's
    reservation) and TensorFlow (TF_CONFIG) run on a Slurm booking."""
    alice = api("alice")
    await inventory(alice)
    rid = await booked_now(alice, WHOLE_N1)
    shown = 'echo "rank=$RANK of $WORLD_SIZE master=$MASTER_ADDR gpus=$CUDA_VISIBLE_DEVICES"'
    torch = await alice("POST", "jobs", {"name": "ddp", "template": "pytorch", "command": shown,
                                         "options": {"mode": "env"}, "reservation": rid,
                                         "start": True})  # fmt: skip
    assert torch.status == 201, torch
    tf = await alice("POST", "jobs", {"name": "tf", "template": "tensorflow",
                                      "command": 'echo "tf=$TF_CONFIG"', "reservation": rid,
                                      "start": True})  # fmt: skip
    assert tf.status == 201, tf

    async def ended(job_id: int) -> dict[str, Any] | None:
        job = (await alice("GET", f"jobs/{job_id}")).body
        states = {t["state"] for t in job["tasks"]}
        return job if states <= {"succeeded", "failed", "lost"} else None

    done = await until(lambda: ended(torch.body["id"]), 90, "the PyTorch tasks ended")
    assert [t["state"] for t in done["tasks"]] == ["succeeded"] * 4, done["tasks"]
    said = []
    for task in done["tasks"]:
        log = await alice("GET", f"jobs/{torch.body['id']}/log", params={"task": task["index"]})
        said.append(log.body["text"].strip())
    ranks = sorted(int(line.split()[0].removeprefix("rank=")) for line in said)
    assert ranks == [0, 1, 2, 3], said
    assert all(" of 4 master=" in line for line in said), said
    # each task is a Slurm job with one GPU of the reservation, pinned by Slurm
    assert all(re.search(r"gpus=[0-3]$", line) for line in said), said
    for task in done["tasks"]:
        _, seen = newest(slurm, task["session"])
        assert seen["reservation"] == engine_name(rid), seen
    finished = await until(lambda: ended(tf.body["id"]), 90, "the TensorFlow task ended")
    assert [t["state"] for t in finished["tasks"]] == ["succeeded"], finished["tasks"]
    log = await alice("GET", f"jobs/{tf.body['id']}/log", params={"task": 0})
    config = json.loads(log.body["text"].strip().removeprefix("tf="))
    assert config["task"] == {"type": "worker", "index": 0}, config


async def test_stop_comes_from_slurm_and_only_the_owner_stops(api, running_hive, slurm) -> None:
    alice, bob = api("alice"), api("bob")
    await inventory(alice)
    rid = await booked_now(alice, WHOLE_N1)
    made = await alice("POST", "jobs", {"name": "long", "command": "sleep 300",
                                        "reservation": rid, "start": True})  # fmt: skip
    assert made.status == 201, made
    job_id = made.body["id"]
    await until(lambda: job_state(alice, job_id, "running"), 60, "the Slurm job running")
    refused = await bob("POST", f"jobs/{job_id}/stop")
    assert refused.status == 403, refused
    stopped = await alice("POST", f"jobs/{job_id}/stop")
    assert stopped.status == 200, stopped
    assert stopped.body["tasks"][0]["state"] == "stopped", stopped.body
    session = stopped.body["tasks"][0]["session"]
    _, left = newest(slurm, session)
    assert left["state"] in ("CANCELLED", "COMPLETED", "FAILED"), left


async def test_a_job_slurm_ends_says_why(api, running_hive, slurm) -> None:
    alice = api("alice")
    await inventory(alice)
    rid = await booked_now(alice, WHOLE_N1)
    made = await alice("POST", "jobs", {"name": "victim", "command": "sleep 300",
                                        "reservation": rid, "start": True})  # fmt: skip
    job_id = made.body["id"]
    running = await until(lambda: job_state(alice, job_id, "running"), 60, "the job running")
    session = running["tasks"][0]["session"]
    slurm_id, _ = newest(slurm, session)
    subprocess.run([f"{slurm.bin}/scancel", slurm_id], env=slurm.env, check=True, timeout=30)
    ended = await until(lambda: job_state(alice, job_id, "failed", "lost"), 60, "the job ended")
    assert "Slurm ended it (CANCELLED)" in ended["tasks"][0]["last_error"], ended


async def test_a_job_reaches_no_gpus_its_owner_does_not_hold(api, running_hive, slurm) -> None:
    alice, bob = api("alice"), api("bob")
    await inventory(alice)
    rid = await booked_now(alice, WHOLE_N1)
    await booked_now(bob, [f"n2:{i}" for i in range(4)])
    more = await alice("POST", "jobs", {"name": "greedy", "command": "true", "start": True,
                                        "gpus": [*WHOLE_N1, "n2:0"]})  # fmt: skip
    assert more.status == 409, more
    assert "n2:0" in more.message, more
    counted = await alice("POST", "jobs", {"name": "count", "command": "true", "start": True,
                                           "reservation": rid,
                                           "options": {"gpu_count": 5}})  # fmt: skip
    assert counted.status in (400, 422), counted
    assert not [j for j in slurm_jobs(slurm).values() if j["user"] == ACCOUNTS["alice"]
                and j["state"] in ("PENDING", "RUNNING")]  # fmt: skip


async def test_a_running_slurm_job_is_occupied_time(api, running_hive, slurm) -> None:
    """A job Slurm runs on a node (submitted outside gpuhive) shows in the calendar as others'
    time on its GPUs (GRES IDX), and keeps gpuhive's bookings off that node while it runs:
    Slurm refuses the reservation, and gpuhive the booking (409)."""
    alice = api("alice")
    await inventory(alice)
    job_id = await bobs_job(slurm, "n1", 1)
    # the calendar shows the job's GPU as others' time, from now to the job's end
    shown = await alice("GET", "overview", params={"host": "n1"})
    assert shown.status == 200, shown
    rows = {row["id"]: row["states"] for row in shown.body["gpus"]}
    assert rows["n1:0"][0] == "o" and rows["n1:1"][0] == "f", rows
    listed = shown.body["engine_jobs"]
    assert [(j["job"], j["user"], j["gpus"]) for j in listed] == [
        (int(job_id), ACCOUNTS["bob"], ["n1:0"])
    ], listed
    # the sidebar's GET hosts: its GPU busy, held by a Slurm job (Slurm's GresUsed)

    async def busy() -> dict[str, Any] | None:
        hosts = {h["name"]: h for h in (await alice("GET", "hosts")).body["hosts"]}
        gpus = {g["index"]: g for g in hosts["n1"]["gpus"]}
        return gpus if gpus[0]["state"] == "busy" else None

    gpus = await until(busy, 30, "n1:0 busy in GET hosts")
    assert gpus[0]["held_by_engine"] == "a Slurm job", gpus[0]
    assert gpus[1]["state"] == "free" and gpus[1]["held_by_engine"] is None, gpus[1]
    made = await alice("POST", "reservations", {"title": "over", "gpus": WHOLE_N1,
                                                "start": iso(datetime.now(UTC)),
                                                "duration": "1h"})  # fmt: skip
    assert made.status == 409, made
    assert "The booking was not made" in made.message and "busy" in made.message, made
    # n2 is free of Slurm jobs: booked as usual
    assert await booked_now(alice, [f"n2:{i}" for i in range(4)])


async def test_a_job_waiting_in_slurms_queue_shows_slurms_estimate(
    api, running_hive, slurm
) -> None:
    """A job on GPUs no booking holds waits in Slurm's queue while bob's Slurm job holds them:
    its task is starting, and GET jobs gives Slurm's estimated start (squeue --start)."""
    alice = api("alice")
    await inventory(alice)
    await bobs_job(slurm, "n2", 4)
    made = await alice("POST", "jobs", {"name": "later", "command": "true", "start": True,
                                        "gpus": [f"n2:{i}" for i in range(4)]})  # fmt: skip
    assert made.status == 201, made
    job_id = made.body["id"]

    async def estimated() -> dict[str, Any] | None:
        listed = {j["id"]: j for j in (await alice("GET", "jobs")).body["jobs"]}
        job = listed[job_id]
        return job if job.get("estimated_start") else None

    job = await until(estimated, 90, "Slurm's estimate of the job's start")
    assert job["tasks"][0]["state"] == "starting", job
    _, seen = newest(slurm, job["tasks"][0]["session"])
    assert seen["state"] == "PENDING" and seen["reservation"] == "(null)", seen
    at = datetime.fromisoformat(job["estimated_start"])
    now = datetime.now(UTC)
    # bob's job may run 10 minutes: Slurm expects to start alice's when it ends
    assert now + timedelta(minutes=8) <= at <= now + timedelta(minutes=11), (at, now)


def test_slurm_jobs_read_only_numbers_nodes_and_accounts() -> None:
    """`squeue --json`: a job's GPUs per node from its gres_detail; a name that looks like
    fields counts for nothing; jobs that hold no GPU now are left out."""
    forged = "x Nodes=n2 GRES=gpu:h100:4(IDX:0-3)"
    jobs = [
        {"job_id": 7, "user_name": "gh-bob", "job_state": "RUNNING", "name": forged,
         "nodes": "n[1-2]", "gres_detail": ["gpu:a100:1(IDX:2)", "gpu:h100:2(IDX:0,3)"],
         "start_time": 1_800_000_000, "end_time": 1_800_000_600},
        {"job_id": 8, "user_name": "gh-bob", "job_state": "PENDING", "nodes": "n1",
         "gres_detail": ["gpu:a100:1(IDX:0)"], "start_time": 0, "end_time": 0},
        {"job_id": 9, "user_name": "gh-bob", "job_state": "RUNNING", "nodes": "n1",
         "gres_detail": [], "start_time": 0, "end_time": 0},
    ]  # fmt: skip
    found = parse_jobs(json.dumps({"jobs": jobs}))
    assert [(j.job_id, j.user, j.gpus) for j in found] == [
        (7, "gh-bob", (("n1", 2), ("n2", 0), ("n2", 3)))
    ]
    assert found[0].end - found[0].start == timedelta(minutes=10)
    with pytest.raises(SlurmParseError):
        parse_jobs("not json")


def slurm_gpus(slurm: SlurmCluster, job_id: str) -> tuple[str, list[int]]:
    """The node and GPU IDXs `scontrol show job -d` gives a running job (as root)."""
    shown = slurm.scontrol("show", "job", "-d", job_id).stdout
    found = re.search(r"^\s*Nodes=(\S+) .*GRES=gpu[^(]*\(IDX:([0-9,\-]+)\)", shown, re.M)
    assert found, shown
    indexes: list[int] = []
    for part in found.group(2).split(","):
        low, _, high = part.partition("-")
        indexes += range(int(low), int(high or low) + 1)
    return found.group(1), indexes


COUNTED = {"gpu_count": 2, "engine": "slurm"}


async def test_a_count_only_job_goes_to_slurms_queue(api, running_hive, slurm) -> None:
    """A queued job of a GPU count for Slurm is its owner's sbatch with --gres=gpu:2 and no
    node or reservation; Slurm picks the node, and the task gets the node and GPU IDXs that
    Slurm gave it (scontrol show job -d), once it runs; its log and stop are Slurm's."""
    alice, bob = api("alice"), api("bob")
    await inventory(alice)
    command = 'echo "on $SLURM_JOB_NODELIST gpus=$CUDA_VISIBLE_DEVICES"; sleep 300'
    made = await alice("POST", "jobs", {"name": "counted", "command": command,
                                        "queued": True, "options": COUNTED})  # fmt: skip
    assert made.status == 201, made
    job_id = made.body["id"]

    async def placed() -> dict[str, Any] | None:
        job = (await alice("GET", f"jobs/{job_id}")).body
        task = job["tasks"][0] if job["tasks"] else None
        return job if task and task["state"] == "running" and task["gpus"] else None

    job = await until(placed, 90, "the job running in Slurm, placed")
    task = job["tasks"][0]
    slurm_id, seen = newest(slurm, task["session"])
    assert seen["user"] == ACCOUNTS["alice"] and seen["reservation"] == "(null)", seen
    node, indexes = slurm_gpus(slurm, slurm_id)
    # the task's host and GPUs are the ones Slurm gave it, by its IDX
    assert task["host"] == node and task["gpu_indices"] == indexes, (task, node, indexes)
    shown = await alice("GET", "hosts")
    uuids = {f"{h['name']}:{g['index']}": g["uuid"] for h in shown.body["hosts"]
             for g in h["gpus"]}  # fmt: skip
    assert task["gpus"] == [uuids[f"{node}:{i}"] for i in indexes], task
    log = await until(lambda: _log_text(alice, job_id), 30, "the job's log")
    assert f"on {node} gpus=0,1" in log, log  # Slurm's pinning, renumbered
    refused = await bob("POST", f"jobs/{job_id}/stop")
    assert refused.status == 403, refused
    stopped = await alice("POST", f"jobs/{job_id}/stop")
    assert stopped.status == 200, stopped
    assert stopped.body["tasks"][0]["state"] == "stopped", stopped.body
    _, left = newest(slurm, task["session"])
    assert left["state"] in ("CANCELLED", "COMPLETED", "FAILED"), left


async def _log_text(call: Any, job_id: int) -> str | None:
    log = await call("GET", f"jobs/{job_id}/log", params={"task": 0})
    text: str = log.body.get("text") or ""
    return text if "gpus=" in text else None


async def test_a_count_only_job_waits_in_slurms_queue(api, running_hive, slurm) -> None:
    """While bob's Slurm jobs hold every GPU, alice's count-only job waits in Slurm's queue:
    starting, with Slurm's estimated start, and no GPUs attributed to it yet."""
    alice = api("alice")
    await inventory(alice)
    await bobs_job(slurm, "n1", 4)
    await bobs_job(slurm, "n2", 4)
    made = await alice("POST", "jobs", {"name": "waits", "command": "true", "queued": True,
                                        "options": COUNTED})  # fmt: skip
    assert made.status == 201, made
    job_id = made.body["id"]

    async def estimated() -> dict[str, Any] | None:
        listed = {j["id"]: j for j in (await alice("GET", "jobs")).body["jobs"]}
        return listed[job_id] if listed[job_id].get("estimated_start") else None

    job = await until(estimated, 90, "Slurm's estimate of the job's start")
    task = job["tasks"][0]
    assert task["state"] == "starting" and task["gpus"] == [], task
    _, seen = newest(slurm, task["session"])
    assert seen["state"] == "PENDING" and seen["user"] == ACCOUNTS["alice"], seen
    at = datetime.fromisoformat(job["estimated_start"])
    now = datetime.now(UTC)
    assert now + timedelta(minutes=8) <= at <= now + timedelta(minutes=11), (at, now)


async def test_count_only_jobs_for_slurm_that_cannot_run_are_refused(
    api, running_hive, slurm
) -> None:
    alice = api("alice")
    await inventory(alice)
    cases = [
        ({"gpu_count": 5, "engine": "slurm"}, {}, "the largest node has 4"),
        ({"gpu_count": 1, "engine": "pbs"}, {}, "no host is a 'pbs' node"),
        (COUNTED, {"template": "pytorch"}, "plain template"),
        (COUNTED, {"command": "echo {gpus}"}, "{gpus} is not known before slurm places"),
        (COUNTED, {"queued": False}, "must be queued"),
    ]
    for options, extra, words in cases:
        body = {"name": "bad", "command": "true", "queued": True, "options": options, **extra}
        refused = await alice("POST", "jobs", body)
        assert refused.status == 422, (body, refused)
        assert words in refused.message, (body, refused.message)
    assert not [j for j in slurm_jobs(slurm).values() if j["user"] == ACCOUNTS["alice"]
                and j["state"] in ("PENDING", "RUNNING")]  # fmt: skip
