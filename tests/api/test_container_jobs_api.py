"""Container jobs through the REST API: a real dockerd, the test image, a real UNIX user (#29).

The site lets the test user reach the session's dockerd through a group (what a site does
with Docker's `docker` group), allows the run's test image and the venv as a read-only mount,
and uses `gpu_flags: none` (no NVIDIA toolkit here): the simulated GPUs follow
`CUDA_VISIBLE_DEVICES`, which the container gets through its env file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from tests.conftest import USERS
from tests.support.engine_access import engine_user
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run jobs as a user")

OWNER = "hivecjob1"
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture
def sim_host(tmp_path: Path, docker_engine: Any) -> LocalSimHost:
    engine_user(docker_engine, OWNER)
    return LocalSimHost("gpu1", tmp_path / "sim")


@pytest.fixture
def hive_config(sim_host: LocalSimHost, docker_engine: Any, container_image: Any) -> dict[str, Any]:
    env = sim_host.env()
    containers = {
        "engine": "docker",
        "binary": docker_engine.binary,
        "socket": docker_engine.host,
        "gpu_flags": "none",
        "images": ["gpuhive-test/python:*"],
        "mounts": [{"path": str(container_image.venv), "read_only": True}],
    }
    host = {"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}
    return {"hosts": [{**host, "containers": containers}], "poll_interval": 0.3,
            "site_timezone": "UTC"}  # fmt: skip


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, f"tok-{OWNER}": {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


async def _discovered(client: Any) -> Any:
    hosts = (await client("GET", "hosts")).body["hosts"]
    return hosts if hosts and len(hosts[0]["gpus"]) == 4 else None


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_container_job_sees_its_gpus_runs_as_owner_and_is_removed_on_stop(
    api, running_hive, sim_host, docker, container_image
):
    owner = api(OWNER)
    await until(lambda: _discovered(owner), timeout=15)
    code = (
        "import os, sys, time; print('in', os.getuid(), os.getgid(), "
        "os.environ['CUDA_VISIBLE_DEVICES'], os.environ['SECRET'], sys.prefix, flush=True); "
        "time.sleep(120)"
    )
    body = {
        "name": "boxed",
        "gpus": ["gpu1:2"],
        "image": container_image.tag,
        "mounts": [str(container_image.venv)],
        "command": f"{container_image.venv_python} -I -c {{code}}",
        "variables": {"code": code},
        "env": {"SECRET": "hunter2"},
        "start": True,
    }
    preview = await owner("POST", "jobs/preview", body)
    assert preview.status == 200, preview
    [shown] = preview.body["tasks"]
    assert shown["shell"].startswith(f"{docker.binary} -H {docker.host} run --rm --init")
    assert "--env-file" in shown["shell"] and "hunter2" not in shown["shell"]

    created = await owner("POST", "jobs", body)
    assert created.status == 201, created
    job_id = created.body["id"]
    [task] = created.body["tasks"]
    assert created.body["container"]["image"] == container_image.tag

    async def seen() -> Any:
        text = (await owner("GET", f"jobs/{job_id}/log", params={"task": 0})).body.get("text", "")
        return text if "in " in text else None

    text = await until(seen, timeout=30)
    account = ensure_user(OWNER)
    uuid = sim_host.config.gpus[2].uuid
    assert f"in {account.pw_uid} {account.pw_gid} {uuid} hunter2 {container_image.venv}" in text

    # The container is the deterministic name with gpuhive's labels; its secret is not in argv.
    name = task["session"]
    inspect = docker.run("inspect", "--format", "{{json .Config.Labels}} {{.HostConfig.Privileged}}"
                         " {{.Config.User}}", name).stdout  # fmt: skip
    assert f'"gpuhive.owner":"{OWNER}"' in inspect and f'"gpuhive.job":"{job_id}"' in inspect
    assert " false " in inspect and f"{account.pw_uid}:{account.pw_gid}" in inspect
    lines = _command_lines(name)
    assert lines and not [line for line in lines if b"hunter2" in line]

    # On the reserved GPU only, in GET hosts (the stand-in sees the container's processes;
    # who they are charged to is the attribution's part: tests/containers).
    async def on_gpu() -> Any:
        gpus = (await owner("GET", "hosts")).body["hosts"][0]["gpus"]
        return {g["index"] for g in gpus if g["processes"]} or None

    assert await until(on_gpu, timeout=20) == {2}

    stopped = await owner("POST", f"jobs/{job_id}/stop")
    assert stopped.status == 200, stopped
    assert stopped.body["status"] == "stopped"
    assert docker.run("ps", "-aq", "--filter", f"name=^{name}$").stdout.strip() == ""


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_images_mounts_and_engine_flags_are_refused(api, running_hive, container_image):
    owner = api(OWNER)
    await until(lambda: _discovered(owner), timeout=15)
    base = {"name": "x", "gpus": ["gpu1:0"], "command": "true", "image": container_image.tag}
    cases = [
        ({**base, "image": "debian:12"}, "not allowed on host gpu1"),
        ({**base, "image": "--privileged"}, "engine flags are never accepted"),
        ({**base, "image": f"{container_image.tag} --privileged"}, "engine flags"),
        ({**base, "mounts": ["/var/run/docker.sock"]}, "Mount '/var/run/docker.sock' is not"),
        ({**base, "mounts": ["/"]}, "is not allowed on host gpu1"),
        ({**base, "options": {"privileged": True}}, "unknown option"),
        ({**base, "env": {"A": "x\n--privileged"}}, "line breaks"),
        ({k: v for k, v in base.items() if k != "image"} | {"mounts": ["/tmp"]}, "give 'image'"),
    ]
    for body, words in cases:
        refused = await owner("POST", "jobs", body)
        assert refused.status == 422, (body, refused)
        assert words in refused.message, (body, refused.message)
    assert (await owner("GET", "jobs")).body["jobs"] == []


def _command_lines(name: str) -> list[bytes]:
    """The host's command lines that name the container (the engine client's, the screen's)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if name.encode() in line:
                out.append(line)
    return out
