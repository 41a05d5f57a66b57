"""A reservation kernel on a real Slurm node (issue #47, item 4): a step of its owner's
allocation in the booking's Slurm reservation, through a real Jupyter server's kernel REST API
and websocket, as real UNIX users.

It runs as the owner's account on the GPUs Slurm gives the allocation, with no server secret;
only its owner controls it; interrupt and restart work; a killed kernel is noticed and
restarted within seconds; at the reservation's end its end policy shuts it down and the
allocation ends with it."""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.kernels.specs import spec_name
from jupyter_gpuhive.model.engines import engine_name
from tests.conftest import TOKENS, book, iso
from tests.kernels.remote_helpers import REPORT, Notebook, kernels_api, report
from tests.slurm.conftest import ACCOUNTS, slurm_hosts
from tests.slurm.test_slurm_api import inventory
from tests.support.kernel_python import kernel_python
from tests.support.pids import alive
from tests.support.slurm import GPUS_PER_NODE, SlurmCluster
from tests.support.waiting import until

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
SECRET = f"env-secret-{uuid.uuid4().hex[:10]}"
WHOLE_N1 = [f"n1:{i}" for i in range(GPUS_PER_NODE)]


@pytest.fixture(scope="module")
def kernel_py() -> str:
    return kernel_python()


@pytest.fixture
def hive_config(
    hive_config: dict[str, Any], slurm: SlurmCluster, kernel_py: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:  # fmt: skip
    monkeypatch.setenv("GPUHIVE_TEST_SECRET", SECRET)
    hosts = [{**h, "kernel_python": kernel_py} for h in slurm_hosts(slurm)]
    return {**hive_config, "hosts": hosts, "unix_users": ACCOUNTS, "min_reservation": "1s",
            "poll_interval": 0.5, "kernel_warning_minutes": 0.05}  # fmt: skip


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any, slurm: SlurmCluster) -> Any:
    """The server with its extensions started; every allocation cancelled afterwards."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    yield jp_serverapp
    for account in ACCOUNTS.values():
        squeue(slurm, account)  # the cluster answers
        subprocess.run([f"{slurm.bin}/scancel", "-u", account], env=slurm.env, check=False,
                       capture_output=True, timeout=30)  # fmt: skip


def squeue(slurm: SlurmCluster, account: str) -> list[list[str]]:
    """The account's jobs now: [job id, state, reservation, name] each."""
    done = subprocess.run(
        [f"{slurm.bin}/squeue", "--noheader", "-u", account, "--format=%i %T %v %j"],
        env=slurm.env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return [line.split() for line in done.stdout.splitlines() if line.strip()]


@SQLITE
async def test_a_kernel_runs_as_a_step_of_its_owners_allocation(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, slurm: SlurmCluster,
    jp_data_dir: Path,
) -> None:  # fmt: skip
    alice = api("alice")
    await inventory(alice)
    made = await book(alice, "notebook", WHOLE_N1, datetime.now(UTC), "10m")
    rid = made.body["id"]
    kernel = await kernels_api(jp_fetch, TOKENS["alice"], "POST", body={"name": spec_name(rid)})
    assert kernel.status == 201, kernel
    kid = kernel.body["id"]
    registry = started.web_app.settings["gpuhive"].kernels

    # One allocation of alice's account, in the booking's Slurm reservation.
    jobs = squeue(slurm, ACCOUNTS["alice"])
    assert len(jobs) == 1 and jobs[0][1:] == ["RUNNING", engine_name(rid),
                                              f"gpuhive-kernel-{rid}"], jobs  # fmt: skip
    job = jobs[0][0]
    detail = slurm.scontrol("show", "job", "-d", job).stdout
    assert "GRES=gpu:a100:4(IDX:0-3)" in detail, detail

    nb = await Notebook.open(jp_ws_fetch, kid, TOKENS["alice"])
    seen = report(await nb.run(REPORT))
    assert seen["user"] == ACCOUNTS["alice"]
    assert seen["cuda"] == "0,1,2,3"  # as Slurm numbers the allocation's GPUs
    assert seen["env"]["SLURM_JOB_ID"] == job and seen["env"]["SLURMD_NODENAME"] == "n1"
    assert seen["env"]["GPUHIVE_KERNEL_RESERVATION"] == str(rid)
    leaked = {k for k, v in seen["env"].items() if SECRET in v}
    assert not leaked and "JUPYTER_TOKEN" not in seen["env"], leaked
    assert seen["pid"] == registry.get(kid).pid
    assert os.stat(f"/proc/{seen['pid']}").st_uid == pwd.getpwnam(ACCOUNTS["alice"]).pw_uid

    # Another user may not signal, restart or shut it down.
    for method, path in (("POST", "interrupt"), ("POST", "restart"), ("DELETE", None)):
        refused = await kernels_api(jp_fetch, TOKENS["bob"], method, kid, *([path] if path else []))
        assert refused.status == 403, refused
        assert "belongs to alice" in refused.body["message"], refused

    # Interrupt: a long cell stops with KeyboardInterrupt (a signal sent from a step).
    sleeping = nb.send("import time; time.sleep(60)")
    await asyncio.sleep(1.0)
    assert (await kernels_api(jp_fetch, TOKENS["alice"], "POST", kid, "interrupt")).status == 204
    stopped = await nb.result(sleeping, timeout=20)
    assert stopped.error == "KeyboardInterrupt", stopped

    # Restart: a fresh process in the same allocation.
    assert (await kernels_api(jp_fetch, TOKENS["alice"], "POST", kid, "restart")).status == 200
    again: dict[str, Any] = {}
    for _ in range(5):
        result = await nb.run(REPORT, timeout=10)
        if result.done and result.text.strip():
            again = report(result)
            break
    assert again["pid"] != seen["pid"] and again["env"]["SLURM_JOB_ID"] == job
    await until(lambda: not alive(seen["pid"]), 10, "the first kernel process gone")

    # Death: a kernel killed on the node is noticed and restarted within seconds.
    os.kill(again["pid"], signal.SIGKILL)
    began = time.monotonic()
    await until(lambda: registry.get(kid).restarts == 2, 20, "the killed kernel restarted")
    assert time.monotonic() - began < 20
    assert registry.get(kid).pid not in (again["pid"], seen["pid"])
    nb.close()

    # The reservation's end: the default policy shuts the kernel down, its allocation ends.
    soon_end = datetime.now(UTC) + timedelta(seconds=6)
    ended = await alice("PATCH", f"reservations/{rid}", {"end": iso(soon_end)})
    assert ended.status == 200, ended

    async def shut_down() -> bool:
        reply = await kernels_api(jp_fetch, TOKENS["alice"], "GET", kid)
        return reply.status == 404

    await until(shut_down, 40, "the kernel shut down at the reservation's end")
    await until(lambda: squeue(slurm, ACCOUNTS["alice"]) == [], 20, "the allocation ended")
    assert registry.get(kid).state == "ended"
    notes = await alice("GET", "violations", params={"reservation": rid, "kind": "kernel-end"})
    actions = [a["handler"] for v in notes.body["violations"] for a in v["actions"]]
    assert "kernel-shutdown" in actions, notes
