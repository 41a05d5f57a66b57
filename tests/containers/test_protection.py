"""Protection sees inside containers (#29): the hostile user (gh-bob, a real UNIX user who may
use the engine, running its client himself) starts a container on a reserved GPU with another
user's uid and gpuhive's labels; the violation names the container and the person the site's
rule makes answer for it, and the kill step removes the container."""

from __future__ import annotations

import asyncio
import os
import pwd
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.hosts.containers import SiteRule
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.model import HostDecl, utcnow
from jupyter_gpuhive.model.containers import ContainerSpec
from jupyter_gpuhive.model.jobs import Job, TaskState
from jupyter_gpuhive.monitor.containers import ContainerOwners, for_site, own_containers
from jupyter_gpuhive.monitor.slices import process_json
from jupyter_gpuhive.notebook.magicviews import violation_line
from jupyter_gpuhive.protection.service import ProtectionSettings
from jupyter_gpuhive.store.jobs import TaskChange
from jupyter_gpuhive.widgets.dashboard_model import DashboardModel
from jupyter_gpuhive.widgets.dashboard_view import process_table
from tests.protection.conftest import SIM_ENV, USER_MAP
from tests.support.engine_access import as_user, engine_user
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")


async def run(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def decl_with_engine(host: Any, docker: Any) -> HostDecl:
    env = host.env()
    engine = {
        "engine": "docker",
        "binary": docker.binary,
        "socket": docker.host,
        "gpu_flags": "none",
    }
    return HostDecl(host.name, transport="local",
                    extra={"env": {k: env[k] for k in SIM_ENV}, "containers": engine})  # fmt: skip


def start(docker: Any, image: Any, by: str, name: str, host: str, gpu: str, uid: int,
          *labels: str) -> str:  # fmt: skip
    """`docker run -d`, as the real user `by` (the engine's client is his), a process that stays
    on `gpu` of the simulated `host`; its id."""
    engine_user(docker, by)
    words = [w for label in labels for w in ("--label", label)]
    return as_user(
        docker, by, "run", "-d", "--name", name, "--network", "none", "--user", f"{uid}:{uid}",
        "--restart", "always", *words,
        "--env", f"GPUHIVE_SIM_HOST={host}", "--env", f"CUDA_VISIBLE_DEVICES={gpu}",
        image.tag, "sleep", "600",
    )  # fmt: skip


def running(docker: Any, cid: str) -> bool:
    return cid in docker.run("ps", "-q", "--no-trunc").stdout.split()


def alices_container_job(store: Any, host: str, gpu_uuid: str, image: str) -> Any:
    """A running container job of alice's in the job table: the task gpuhive would run."""
    spec = Job(name="train", owner="alice", command="sleep 600", container=ContainerSpec(image))
    job = store.jobs.create(
        spec, render_tasks(spec, [(host, "127.0.0.1", [GpuSlot(host, "127.0.0.1", 0, gpu_uuid)])])
    )
    (task,) = job.tasks
    store.jobs.change_tasks([TaskChange(task.id, TaskState.STARTING)], {TaskState.PENDING})
    store.jobs.change_tasks([TaskChange(task.id, TaskState.RUNNING)], {TaskState.STARTING})
    return task


async def test_forged_container_on_a_reserved_gpu_is_a_violation_and_is_removed(
    docker, container_image, make_local_host, make_rig, sim_users
) -> None:
    alice_uid = pwd.getpwnam("gh-alice").pw_uid
    host = make_local_host()
    gpu0 = host.config.gpus[0].uuid
    settings = ProtectionSettings(
        level=1, user_map=USER_MAP, handlers={"kill": {"mode": "user"}},
        ladder=[{"after": 0, "handler": "kill", "signal": "KILL"}],
    )  # fmt: skip
    rig = make_rig([decl_with_engine(host, docker)], settings)
    rig.monitor.containers = ContainerOwners(
        rig.pool, SiteRule(), own_containers(rig.store, run), rig.protection.unix_user
    )
    await rig.sweep()  # discovery fills the inventory
    booked = await run(rig.reserve, "alice", f"{host.name}:0")

    # alice's own container job, started as gpuhive starts it (its name is the task's session).
    task = await run(alices_container_job, rig.store, host.name, gpu0, container_image.tag)
    own_labels = ("gpuhive=1", "gpuhive.owner=alice", f"gpuhive.job={task.job_id}")
    alices = start(docker, container_image, "gh-alice", task.session, host.name, "0", alice_uid,
                   *own_labels)  # fmt: skip
    # bob, who may use the engine, copies her labels and uid: not her container for all that.
    bobs_name = f"bobs-{uuid.uuid4().hex[:6]}"
    bobs = start(docker, container_image, "gh-bob", bobs_name, host.name, "0", alice_uid,
                 *own_labels)  # fmt: skip

    sweep = await rig.sweep()
    procs = {p.container.id: p for p in sweep.samples[host.name].processes if p.container}
    assert set(procs) == {alices, bobs}
    assert (procs[alices].user, procs[alices].container.source) == ("gh-alice", "gpuhive")
    assert (procs[bobs].user, procs[bobs].container.source) == ("root", "unattributed")
    assert procs[bobs].container.process_user == "gh-alice"  # the uid bob picked: not trusted
    assert procs[bobs].container.image == container_image.tag

    # The hosts listing, %gpustatus and the dashboard show the container beside the process.
    live = rig.monitor.sampler.live[host.name].sample
    assert {p.container.name for p in live.processes if p.container} == {task.session, bobs_name}
    shown = process_json(procs[bobs], {})
    assert shown["user"] == "root" and shown["container"]["name"] == bobs_name
    assert shown["container"]["process_user"] == "gh-alice"
    line = violation_line(f"{host.name}:0", {**shown, "violation": {"holder": "alice"}}, "alice")
    assert f"in container {bobs_name} ({container_image.tag})" in line
    listing = [{"name": host.name, "gpus": [{"id": f"{host.name}:0", "processes": [shown]}]}]
    dashboard = DashboardModel(None)
    (row,) = dashboard.processes = dashboard.process_rows(listing)
    assert row.container == f"{bobs_name} ({container_image.tag})"
    assert f"<td style='padding:2px 8px'>{bobs_name} (" in process_table(dashboard)

    (violation,) = await until(lambda: [v for v in rig.history() if v.actions], timeout=20)
    await rig.protection.actions.drain()
    (violation,) = rig.history()
    assert (violation.kind, violation.offender, violation.holder) == ("foreign", "root", "alice")
    assert violation.reservation_id == booked.id
    assert violation.pids == (procs[bobs].pid,)
    assert bobs_name in violation.detail and bobs[:12] in violation.detail
    assert container_image.tag in violation.detail and "unattributed" in violation.detail
    (kill,) = violation.actions
    assert kill.outcome == "ok" and f"{bobs[:12]} stopped and removed" in kill.detail
    # Removed, not restarted (--restart always would have brought back a killed process).
    assert bobs not in docker.run("ps", "-aq", "--no-trunc").stdout.split()
    assert running(docker, alices)


async def test_the_site_may_trust_a_label_for_containers_it_did_not_start(
    docker, container_image, make_local_host, make_rig, sim_users
) -> None:
    host = make_local_host()
    rig = make_rig([decl_with_engine(host, docker)], ProtectionSettings(level=0, user_map=USER_MAP))
    rule = SiteRule("gpuhive.owner")
    rig.monitor.containers = ContainerOwners(rig.pool, rule, unix_user=rig.protection.unix_user)
    # bob, who may use the engine, runs two containers as uid 0: one plain, one labelled his.
    root_run = start(docker, container_image, "gh-bob", f"plain-{uuid.uuid4().hex[:6]}",
                     host.name, "1", 0)  # fmt: skip
    labelled = start(docker, container_image, "gh-bob", f"lab-{uuid.uuid4().hex[:6]}", host.name,
                     "2", 0, "gpuhive.owner=bob")  # fmt: skip
    sample = (await rig.sweep()).samples[host.name]
    owners = {p.container.id: (p.user, p.container.source) for p in sample.processes}
    assert owners == {root_run: ("root", "unattributed"), labelled: ("gh-bob", "label")}
    asked = rig.monitor.containers.inspections
    await rig.sweep()  # known containers are not asked about again
    assert rig.monitor.containers.inspections == asked
    # Usage is charged to the owner, not to the uid (0) the labelled container runs as.
    now = utcnow()
    usage = await run(rig.store.usage.window, now - timedelta(hours=1), now + timedelta(hours=1))
    assert {name for name, _ in usage["users"]} == {"root", "gh-bob"}

    rig.monitor.containers.rule = SiteRule(unattributed="exempt")
    rig.monitor.containers.known.clear()
    sample = (await rig.sweep()).samples[host.name]
    assert {p.container.id: p.user for p in sample.processes} == {root_run: None, labelled: None}

    # An engine that does not answer (here: a wrong socket) charges nobody, not root.
    rig.monitor.containers.rule = SiteRule("gpuhive.owner")
    rig.monitor.containers.known.clear()
    wrong = decl_with_engine(host, replace(docker, host="unix:///nonexistent/docker.sock"))
    rig.pool.hosts[host.name] = wrong
    sample = (await rig.sweep()).samples[host.name]
    assert {(p.user, p.container.source) for p in sample.processes} == {(None, None)}
    assert (host.name, "docker") in rig.monitor.containers.silent


async def test_gpuhive_knows_its_containers_from_the_job_table_and_the_kernels(
    make_local_host, make_rig
) -> None:
    host = make_local_host()
    rig = make_rig([HostDecl(host.name, transport="local")], ProtectionSettings(level=0))
    task = await run(alices_container_job, rig.store, host.name, "GPU-x", "lab/x:1")

    async def kernels() -> dict[tuple[str, str], str]:  # as kernels.images reads its registry
        return {(host.name, "gpuhive-kernel-k1"): "bob"}

    owners = for_site(
        rig.store,
        rig.pool,
        rig.monitor.run_blocking,
        ProtectionSettings(user_map=USER_MAP),
        kernels,
    )
    assert await owners.own() == {(host.name, task.session): "alice",
                                  (host.name, "gpuhive-kernel-k1"): "bob"}  # fmt: skip
    assert owners.unix_user("alice") == "gh-alice"
