"""A notebook's kernel on its reservation: a real Jupyter server, its kernel REST API and
websocket, a real sshd host with the nvidia-smi stand-in, real UNIX users, real ipykernel.

The kernel runs as the reservation's owner on the reserved GPUs with an explicit environment;
only its owner or an admin may signal, restart, shut down or attach to it; interrupt and
restart work; refusals are JSON with reasons."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpuhive.sim.cluster import SshdCluster, ensure_user
from tests.conftest import USERS, book, soon
from tests.hosts.test_blackhole import blackhole  # noqa: F401 - the fixture
from tests.kernels.remote_helpers import (
    REPORT,
    Notebook,
    kernels_api,
    report,
    sessions_api,
    write_spec,
)
from tests.support.kernel_python import kernel_python

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="runs kernels as real users (needs root)"),
    pytest.mark.skipif(
        shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None,
        reason="needs OpenSSH sshd",
    ),
]

OWNER, OTHER = "gh-alice", "gh-bob"  # real UNIX users, and the gpuhive users of those names
TOKENS = {OWNER: "tok-gh-alice", OTHER: "tok-gh-bob", "boss": "tok-root"}
RUN = uuid.uuid4().hex[:10]
SERVER_TOKEN = f"server-token-{RUN}"
ENV_SECRET = f"env-secret-{RUN}"
HOST, LOCAL, BROKEN = "kgpu1", "klocal", "kbroken"


@pytest.fixture(scope="module")
def kernel_py() -> str:
    return kernel_python()


@pytest.fixture(scope="module")
def cluster() -> Iterator[SshdCluster]:
    for name in (OWNER, OTHER):
        ensure_user(name)
    with SshdCluster([HOST]) as running:
        for name in (OWNER, OTHER):
            running.add_user(name)
        yield running


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.sqlite'}"


@pytest.fixture
def hive_config(cluster: SshdCluster, kernel_py: str) -> dict[str, Any]:
    host = cluster[HOST]
    gpus = [{"index": g.index, "uuid": g.uuid} for g in cluster.host_config(HOST).gpus]
    return {
        "hosts": [
            {"name": HOST, "address": host.address, "port": host.port, "user": "root",
             "gpus": gpus, "kernel_python": kernel_py},
            {"name": LOCAL, "transport": "local", "gpu_count": 1, "kernel_python": kernel_py},
            {"name": BROKEN, "transport": "local", "gpu_count": 1,
             "kernel_python": "/usr/bin/python3"},  # no ipykernel there
        ],
        "ssh_key": str(cluster.client_key), "known_hosts": [str(cluster.known_hosts)],
        "poll_interval": 1.0, "site_timezone": "UTC", "admin_groups": ["admins"],
        "kernel_specs": False, "min_reservation": "5m",
    }  # fmt: skip


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    monkeypatch.setenv("JUPYTER_TOKEN", SERVER_TOKEN)
    monkeypatch.setenv("GPUHIVE_TEST_SECRET", ENV_SECRET)
    users = {**USERS, TOKENS[OWNER]: {"name": OWNER, "groups": []},
             TOKENS[OTHER]: {"name": OTHER, "groups": []}}  # fmt: skip
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    jp_server_config["IdentityProvider"] = {"token": SERVER_TOKEN}
    return jp_server_config


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    """The server as `jupyter server` starts it: extension start hooks run (hive, guard)."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


async def reserve(api: Any, gpu: str, start: datetime | None = None) -> int:
    made = await book(api(OWNER), "notebook", [gpu], start or datetime.now(timezone.utc), "1h")
    return int(made.body["id"])


def ps_user(cluster: SshdCluster, pid: int) -> str:
    return cluster.ssh(HOST, "root", ["ps", "-o", "user=", "-p", str(pid)]).stdout.strip()


async def gone(cluster: SshdCluster, pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not ps_user(cluster, pid):
            return True
        await asyncio.sleep(0.3)
    return False


async def test_kernel_runs_as_owner_on_reserved_gpus_and_only_the_owner_controls_it(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path,
    cluster: SshdCluster,
) -> None:  # fmt: skip
    rid = await reserve(api, f"{HOST}:1")
    uuid1 = cluster.host_config(HOST).gpus[1].uuid
    spec = write_spec(jp_data_dir, f"res{rid}", {"reservation_id": rid})
    made = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert made.status == 201, made
    kid = made.body["id"]
    registry = started.web_app.settings["gpuhive"].kernels
    record = registry.get(kid)
    assert (record.owner, record.host, record.gpu_uuids) == (OWNER, HOST, (uuid1,))

    nb = await Notebook.open(jp_ws_fetch, kid, TOKENS[OWNER])
    seen = report(await nb.run(REPORT))
    assert seen["user"] == OWNER
    assert seen["cuda"] == uuid1  # the reserved GPU by UUID, nothing else
    assert seen["order"] == "PCI_BUS_ID"
    assert seen["sim_host"] == HOST  # it runs on the host (its sshd's environment)
    assert seen["pid"] == record.pid
    leaked = {k for k, v in seen["env"].items() if SERVER_TOKEN in v or ENV_SECRET in v}
    assert not leaked and "JUPYTER_TOKEN" not in seen["env"], leaked
    # Only the owner's own kernel token goes along (gpuhive's API as them, nothing else).
    assert seen["env"]["GPUHIVE_TOKEN"].startswith("gpuhive-kernel-")
    assert seen["env"]["GPUHIVE_KERNEL_RESERVATION"] == str(rid)

    # The nvidia-smi stand-in puts the kernel's process, owned by the owner, on that GPU.
    smi = cluster.ssh(HOST, "root", "nvidia-smi --query-compute-apps=pid,gpu_uuid "
                      "--format=csv,noheader")  # fmt: skip
    assert f"{seen['pid']}, {uuid1}" in smi.stdout, smi
    assert ps_user(cluster, seen["pid"]) == OWNER
    # The monitor sees it as the owner's process on the owner's GPU: no violation.
    deadline, procs = time.monotonic() + 30, []
    while time.monotonic() < deadline and not procs:
        hosts = (await api(OWNER)("GET", "hosts")).body["hosts"]
        gpu = next(g for h in hosts if h["name"] == HOST for g in h["gpus"] if g["index"] == 1)
        procs = [p for p in gpu["processes"] if p["pid"] == seen["pid"]]
        await asyncio.sleep(0.5)
    assert procs and procs[0]["user"] == OWNER, procs
    await asyncio.sleep(2.5)  # two more sweeps
    found = await api("boss")("GET", "violations", params={"reservation": str(rid)})
    assert found.status == 200 and found.body["violations"] == [], found

    # Another user may not signal, restart, shut down or attach to it; it keeps running.
    for method, path in (("POST", "interrupt"), ("POST", "restart"), ("DELETE", None)):
        refused = await kernels_api(jp_fetch, TOKENS[OTHER], method, kid, *([path] if path else []))
        assert refused.status == 403, refused
        assert f"belongs to {OWNER}" in refused.body["message"], refused
    with pytest.raises(HTTPClientError) as attach:
        await Notebook.open(jp_ws_fetch, kid, TOKENS[OTHER])
    assert attach.value.code == 403
    # A session on it does not help: deleting that session would shut the kernel down.
    body = {"kernel": {"id": kid}, "path": "theirs.ipynb", "type": "notebook", "name": ""}
    session = await sessions_api(jp_fetch, TOKENS[OTHER], "POST", body=body)
    assert session.status == 201, session
    refused = await sessions_api(jp_fetch, TOKENS[OTHER], "DELETE", session.body["id"])
    assert refused.status == 403 and f"belongs to {OWNER}" in refused.body["message"], refused
    assert registry.get(kid).state == "running" and registry.get(kid).restarts == 0

    # Interrupt stops a long cell with KeyboardInterrupt (a signal to its process group).
    sleeping = nb.send("import time; time.sleep(60)")
    await asyncio.sleep(1.0)
    began = time.monotonic()
    assert (await kernels_api(jp_fetch, TOKENS[OWNER], "POST", kid, "interrupt")).status == 204
    stopped = await nb.result(sleeping, timeout=20)
    assert stopped.error == "KeyboardInterrupt" and time.monotonic() - began < 10, stopped
    assert (await kernels_api(jp_fetch, TOKENS["boss"], "POST", kid, "interrupt")).status == 204

    # Restart: a fresh process on the same GPUs, same owner; the open notebook carries on.
    restarted = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", kid, "restart")
    assert restarted.status == 200, restarted
    again = {}
    # The first messages after a restart can miss iopub (NOTES); the provisioner waits for
    # the kernel's answer there, so one try is the rule.
    for _ in range(5):
        result = await nb.run(REPORT, timeout=10)
        if result.done and result.text.strip():
            again = report(result)
            break
    assert again["pid"] != seen["pid"] and again["cuda"] == uuid1 and again["user"] == OWNER
    assert registry.get(kid).restarts == 1 and registry.get(kid).pid == again["pid"]
    assert await gone(cluster, seen["pid"], 5)
    nb.close()

    # Shut down by its owner: the process is gone, the record says so.
    assert (await kernels_api(jp_fetch, TOKENS[OWNER], "DELETE", kid)).status == 204
    assert registry.get(kid).state == "ended"
    assert await gone(cluster, again["pid"], 10)


async def test_refusals_say_why(
    started: Any, api: Any, jp_fetch: Any, jp_data_dir: Path, cluster: SshdCluster
) -> None:
    later = soon(3)
    upcoming = await reserve(api, f"{HOST}:2", later)
    spec = write_spec(jp_data_dir, "upcoming", {"reservation_id": upcoming})
    early = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert early.status == 409, early
    assert f"Reservation {upcoming} runs from {later:%Y-%m-%d %H:%M}" in early.body["message"]
    assert "has not started yet" in early.body["message"]

    now = await reserve(api, f"{HOST}:3")
    theirs = write_spec(jp_data_dir, "theirs", {"reservation_id": now})
    refused = await kernels_api(jp_fetch, TOKENS[OTHER], "POST", body={"name": theirs})
    assert refused.status == 403 and f"is {OWNER}'s" in refused.body["message"], refused

    missing = write_spec(jp_data_dir, "missing", {"reservation_id": 987654})
    reply = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": missing})
    assert reply.status == 404 and "no reservation 987654" in reply.body["message"], reply
    unnamed = write_spec(jp_data_dir, "unnamed", {})
    reply = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": unnamed})
    assert reply.status == 422 and "names no reservation" in reply.body["message"], reply

    broken = await reserve(api, f"{BROKEN}:0")
    spec = write_spec(jp_data_dir, "broken", {"reservation_id": broken})
    reply = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert reply.status == 503, reply
    message = reply.body["message"]
    assert f"on {BROKEN}" in message and "ipykernel is not installed" in message, message
    assert "`/usr/bin/python3 -m pip install ipykernel`" in message, message
    assert (await kernels_api(jp_fetch, TOKENS[OWNER], "GET")).body == []  # nothing left over


async def test_local_transport_kernel(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path
) -> None:
    rid = await reserve(api, f"{LOCAL}:0")
    spec = write_spec(jp_data_dir, "local", {"reservation_id": rid})
    made = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert made.status == 201, made
    registry = started.web_app.settings["gpuhive"].kernels
    nb = await Notebook.open(jp_ws_fetch, made.body["id"], TOKENS[OWNER])
    seen = report(await nb.run(REPORT))
    assert seen["user"] == OWNER and seen["cuda"] == registry.get(made.body["id"]).gpu_uuids[0]
    assert not any(SERVER_TOKEN in v or ENV_SECRET in v for v in seen["env"].values())
    assert seen["env"]["PATH"].startswith("/usr/local/sbin")  # the fixed base, not ours
    nb.close()
    assert (await kernels_api(jp_fetch, TOKENS[OWNER], "DELETE", made.body["id"])).status == 204
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(seen["pid"]):
        await asyncio.sleep(0.2)
    assert not _alive(seen["pid"])


def _alive(pid: int) -> bool:
    done = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return bool(done.stdout.strip()) and not done.stdout.strip().startswith("Z")


async def test_pytorch_on_the_kernel(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path,
    cluster: SshdCluster,
) -> None:  # fmt: skip
    kernel_python(["torch==2.13.0"])  # the CPU wheel (the `test` extra pins the same)
    rid = await reserve(api, f"{HOST}:0")
    spec = write_spec(jp_data_dir, "torch", {"reservation_id": rid})
    made = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert made.status == 201, made
    nb = await Notebook.open(jp_ws_fetch, made.body["id"], TOKENS[OWNER])
    cell = await nb.run(
        "import json, os, torch\n"
        "t = torch.arange(6.0).reshape(2, 3)\n"
        "print(json.dumps({'sum': t.sum().item(), 'device': str(t.device),"
        " 'count': torch.cuda.device_count(), 'visible': os.environ['CUDA_VISIBLE_DEVICES']}))",
        timeout=120,
    )
    assert cell.done and cell.error is None, cell
    seen = json.loads(cell.text.strip().splitlines()[-1])
    # CPU-only torch reports no CUDA device; the environment is what the reservation says.
    assert seen == {"sum": 15.0, "device": "cpu", "count": 0,
                    "visible": cluster.host_config(HOST).gpus[0].uuid}  # fmt: skip
    nb.close()
    assert (await kernels_api(jp_fetch, TOKENS[OWNER], "DELETE", made.body["id"])).status == 204


async def test_killing_the_hosts_sshd_marks_the_kernel_dead_within_10_s(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path,
    cluster: SshdCluster,
) -> None:  # fmt: skip
    rid = await reserve(api, f"{HOST}:1")
    spec = write_spec(jp_data_dir, "lost", {"reservation_id": rid})
    made = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert made.status == 201, made
    kid = made.body["id"]
    registry = started.web_app.settings["gpuhive"].kernels
    pid = registry.get(kid).pid
    nb = await Notebook.open(jp_ws_fetch, kid, TOKENS[OWNER])
    busy = nb.send("import time; time.sleep(60)")
    await asyncio.sleep(1.0)
    began = time.monotonic()
    try:
        cluster.stop_host(HOST)  # the listener and every session's sshd: SIGKILL
        statuses: list[str] = []
        while time.monotonic() - began < 15 and "dead" not in statuses:
            try:
                raw = await asyncio.wait_for(nb.ws.read_message(), 1.0)
            except TimeoutError:
                continue
            if raw is None:
                break
            msg = json.loads(raw)
            if msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") != busy:
                statuses.append(msg["content"]["execution_state"])
        dead_after = time.monotonic() - began
        assert "dead" in statuses, statuses  # the notebook is told; its cell does not hang
        assert dead_after <= 10, dead_after
        record = registry.get(kid)
        assert record.state == "dead", record
        assert f"the SSH connection to {HOST}" in (record.reason or ""), record
        assert (await kernels_api(jp_fetch, TOKENS[OWNER], "GET", kid)).status == 404
        # The orphaned kernel exits by itself (JPY_PARENT_PID: its sshd is gone).
        assert await gone_local(pid, 5)
    finally:
        nb.close()
        cluster.start_host(HOST)


async def gone_local(pid: int | None, within: float) -> bool:
    """The host is this machine: its processes are ours to see."""
    deadline = time.monotonic() + within
    while pid is not None and time.monotonic() < deadline and _alive(pid):
        await asyncio.sleep(0.2)
    return pid is not None and not _alive(pid)


async def test_a_silent_host_marks_the_kernel_dead_and_the_kernel_ends_itself(
    started: Any, api: Any, jp_fetch: Any, jp_data_dir: Path, cluster: SshdCluster,
    blackhole: Any,  # noqa: F811 - the imported fixture
) -> None:  # fmt: skip
    """Packets dropped both ways (no RST, no FIN): the SSH keepalive notices, and the kernel,
    whose SSH session lives on, exits once our keep-alive lines stop."""
    drop, restore = blackhole
    rid = await reserve(api, f"{HOST}:2")
    spec = write_spec(jp_data_dir, "silent", {"reservation_id": rid, "orphan_timeout": 4})
    made = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert made.status == 201, made
    registry = started.web_app.settings["gpuhive"].kernels
    record = registry.get(made.body["id"])
    began = time.monotonic()
    drop(cluster[HOST].port)
    try:
        while time.monotonic() - began < 15 and record.state != "dead":
            await asyncio.sleep(0.1)
        noticed = time.monotonic() - began
        assert record.state == "dead" and noticed <= 10, (noticed, record)
        assert await gone_local(record.pid, 4 + 6)  # orphan_timeout, and some slack
        while time.monotonic() - began < 15:
            if (await kernels_api(jp_fetch, TOKENS[OWNER], "GET", record.kernel_id)).status == 404:
                break
            await asyncio.sleep(0.2)
        assert time.monotonic() - began <= 15  # the server has let go of it too
    finally:
        restore()
