"""A reservation kernel in a container image (#29): a real Jupyter server, the session's own
dockerd and test image, a real UNIX user; the kernel runs in the image as its owner on the
reserved GPU, interrupt and restart work, and shutting it down removes its container."""

from __future__ import annotations

import asyncio
import os
import pwd
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.kernels.images import own_kernel_containers
from jupyter_gpuhive.sim.cluster import SshdCluster, ensure_user
from tests.conftest import USERS, book
from tests.kernels.remote_helpers import REPORT, Notebook, kernels_api, report, write_spec
from tests.support.engine_access import engine_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs kernels as real users")

OWNER, TOKEN = "gh-alice", "tok-gh-alice"
HOST, SSH_HOST = "kimage", "kimagessh"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.sqlite'}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SshdCluster]:
    ensure_user(OWNER)
    with SshdCluster([SSH_HOST]) as running:
        running.add_user(OWNER)
        yield running


@pytest.fixture
def hive_config(docker_engine: Any, container_image: Any, cluster: SshdCluster) -> dict[str, Any]:
    engine_user(docker_engine, OWNER)
    containers = {
        "engine": "docker", "binary": docker_engine.binary, "socket": docker_engine.host,
        "gpu_flags": "none", "images": ["gpuhive-test/python:*"],
        "mounts": [{"path": str(container_image.venv), "read_only": True}],
        "kernel_image": container_image.tag, "kernel_python": container_image.venv_python,
    }  # fmt: skip
    host = {"name": HOST, "transport": "local", "gpu_count": 2, "containers": containers}
    sshd = cluster[SSH_HOST]
    gpus = [{"index": g.index, "uuid": g.uuid} for g in cluster.host_config(SSH_HOST).gpus]
    remote = {"name": SSH_HOST, "address": sshd.address, "port": sshd.port, "user": "root",
              "gpus": gpus, "containers": containers}  # fmt: skip
    return {"hosts": [host, remote], "poll_interval": 1.0, "site_timezone": "UTC",
            "kernel_specs": False, "min_reservation": "5m", "ssh_key": str(cluster.client_key),
            "known_hosts": [str(cluster.known_hosts)]}  # fmt: skip


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    users = {**USERS, TOKEN: {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    return jp_server_config


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


INSIDE = "import os; print(os.path.exists('/.dockerenv'), os.getuid())"


async def test_a_kernel_in_an_image_prints_its_gpus_and_ends_with_its_container(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path, docker: Any
) -> None:
    made = await book(api(OWNER), "nb", [f"{HOST}:1"], datetime.now(timezone.utc), "1h")
    spec = write_spec(jp_data_dir, "boxed", {"reservation_id": made.body["id"]})
    kernel = await kernels_api(jp_fetch, TOKEN, "POST", body={"name": spec})
    assert kernel.status == 201, kernel
    kid = kernel.body["id"]
    record = started.web_app.settings["gpuhive"].kernels.get(kid)
    nb = await Notebook.open(jp_ws_fetch, kid, TOKEN)
    seen = report(await nb.run(REPORT))
    assert seen["user"] == OWNER and seen["cuda"] == record.gpu_uuids[0]
    assert (await nb.run(INSIDE)).text.split() == ["True", str(pwd.getpwnam(OWNER).pw_uid)]
    names = docker.run("ps", "--format", "{{.Names}}").stdout.split()
    assert f"gpuhive-kernel-{kid}" in names, names
    owners = await own_kernel_containers(started.web_app.settings["gpuhive"].kernels)()
    assert owners == {(HOST, f"gpuhive-kernel-{kid}"): OWNER}

    # Interrupt reaches the kernel through the engine's client.
    cell = nb.send("import time; time.sleep(60)")
    await asyncio.sleep(1.0)
    assert (await kernels_api(jp_fetch, TOKEN, "POST", kid, "interrupt")).status == 204
    assert (await nb.result(cell, timeout=20)).error == "KeyboardInterrupt"

    # Restart: a new container; the old one is gone.
    assert (await kernels_api(jp_fetch, TOKEN, "POST", kid, "restart")).status == 200
    again = report(await nb.run(REPORT))
    assert again["cuda"] == record.gpu_uuids[0]
    nb.close()
    assert (await kernels_api(jp_fetch, TOKEN, "DELETE", kid)).status == 204
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _kernel_containers(docker):
        await asyncio.sleep(0.2)
    assert _kernel_containers(docker) == []


def _kernel_containers(docker: Any) -> list[str]:
    names = docker.run("ps", "-a", "--format", "{{.Names}}").stdout.split()
    return [n for n in names if n.startswith("gpuhive-kernel-")]


async def test_a_kernelspec_image_off_the_allow_list_is_refused(
    started: Any, api: Any, jp_fetch: Any, jp_data_dir: Path
) -> None:
    made = await book(api(OWNER), "nb", [f"{HOST}:0"], datetime.now(timezone.utc), "1h")
    for image in ("debian:12", "--privileged"):
        config = {"reservation_id": made.body["id"], "image": image}
        spec = write_spec(jp_data_dir, "evil", config)
        refused = await kernels_api(jp_fetch, TOKEN, "POST", body={"name": spec})
        assert refused.status == 422, refused
        assert f"Image {image!r} is not allowed" in str(refused.body), refused
    assert (await kernels_api(jp_fetch, TOKEN, "GET")).body == []


async def test_a_kernel_in_an_image_on_an_ssh_host(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path, docker: Any
) -> None:
    """Over SSH the host makes the kernel's private folder, mounts it, and signals go through
    the engine (the kernel's pid is the container's)."""
    made = await book(api(OWNER), "nb", [f"{SSH_HOST}:0"], datetime.now(timezone.utc), "1h")
    spec = write_spec(jp_data_dir, "boxedssh", {"reservation_id": made.body["id"]})
    kernel = await kernels_api(jp_fetch, TOKEN, "POST", body={"name": spec})
    assert kernel.status == 201, kernel
    kid = kernel.body["id"]
    record = started.web_app.settings["gpuhive"].kernels.get(kid)
    nb = await Notebook.open(jp_ws_fetch, kid, TOKEN)
    seen = report(await nb.run(REPORT))
    assert seen["user"] == OWNER and seen["cuda"] == record.gpu_uuids[0]
    assert (await nb.run(INSIDE)).text.split() == ["True", str(pwd.getpwnam(OWNER).pw_uid)]
    cell = nb.send("import time; time.sleep(60)")
    await asyncio.sleep(1.0)
    assert (await kernels_api(jp_fetch, TOKEN, "POST", kid, "interrupt")).status == 204
    assert (await nb.result(cell, timeout=20)).error == "KeyboardInterrupt"
    assert (await kernels_api(jp_fetch, TOKEN, "POST", kid, "restart")).status == 200
    assert report(await nb.run(REPORT))["cuda"] == record.gpu_uuids[0]
    nb.close()
    assert (await kernels_api(jp_fetch, TOKEN, "DELETE", kid)).status == 204
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _kernel_containers(docker):
        await asyncio.sleep(0.2)
    assert _kernel_containers(docker) == []
    assert _kernel_folders() == []


def _kernel_folders() -> list[Path]:
    """The private folders SSH hosts made for kernels in images (this test's host: here)."""
    return list(Path("/tmp").glob("gpuhive-kimage-*"))
