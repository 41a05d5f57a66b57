"""The launcher on real hosts: screen sessions as a real test user, over `local` and real sshd."""

from __future__ import annotations

import asyncio
import json
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.model.jobs import Job, TaskState
from jupyter_gpuhive.sim.cluster import LocalSimHost, SshdCluster
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.ports import free_port
from jupyter_gpuhive.sim.users import ensure_user, is_root
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs
from tests.support.pids import alive
from tests.support.waiting import until

pytestmark = [
    pytest.mark.skipif(not is_root(), reason="runs tasks as a real test user (needs root)"),
    pytest.mark.skipif(shutil.which("screen") is None, reason="needs GNU screen"),
]

OWNER = "hivejob1"  # at most 8 characters: `ps -o user=` truncates longer names

# Prints its pid, process group and the environment a distributed job cares about, then
# waits; on SIGINT says so and exits like an interrupted program (130).
PROBE = """\
import json, os, sys, time
keys = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RANK", "LOCAL_RANK", "WORLD_SIZE",
        "MASTER_ADDR", "NOTE")
print(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "argv": sys.argv[1:],
                  "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in keys}}), flush=True)
try:
    time.sleep(float(os.environ.get("SLEEP", "60")))
except KeyboardInterrupt:
    print("got SIGINT", flush=True)
    sys.exit(130)
"""


@dataclass
class Hive:
    """A store, a pool over simulated hosts, and a launcher: what the server would hold."""

    jobs: Jobs
    pool: HostPool
    launcher: Launcher
    hosts: dict[str, LocalSimHost]

    def slots(self, host: str, *indices: int) -> tuple[str, str, list[GpuSlot]]:
        gpus = self.hosts[host].config.gpus
        return (host, "127.0.0.1", [GpuSlot(host, "127.0.0.1", i, gpus[i].uuid) for i in indices])

    async def create(self, spec: Job, *hosts: tuple[str, str, list[GpuSlot]]) -> Job:
        return await asyncio.to_thread(self.jobs.create, spec, render_tasks(spec, list(hosts)))


def job(command: str, **kwargs: Any) -> Job:
    """A job of the test user with a unique name (its screen sessions never clash)."""
    name = kwargs.pop("name", f"t{uuid.uuid4().hex[:8]}")
    return Job(name=name, owner=OWNER, command=command, **kwargs)


def sessions() -> list[str]:
    """The test user's screen session names."""
    out = subprocess.run(
        ["runuser", "-u", OWNER, "--", "screen", "-ls"], capture_output=True, text=True
    ).stdout
    return [line.split()[0].split(".", 1)[1] for line in out.splitlines() if line.startswith("\t")]


def first_json(text: str) -> dict[str, Any]:
    return json.loads(next(line for line in text.splitlines() if line.startswith("{")))


def user_of(pid: int) -> str:
    return subprocess.run(["ps", "-o", "user=", "-p", str(pid)], capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def owner() -> Iterator[pwd.struct_passwd]:
    account = ensure_user(OWNER)
    yield account
    _quit_sessions()


def _quit_sessions() -> None:
    """Kill what the tests left behind: the test user's gpuhive screen sessions."""
    for name in sessions():
        if name.startswith("gpuhive-"):
            subprocess.run(["runuser", "-u", OWNER, "--", "screen", "-S", name, "-X", "quit"])


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the test user can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gpuhive-jobtest-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def bin_without_screen() -> Path:
    """A PATH directory with just what the local transport and a shell need (no screen)."""
    bare = Path(tempfile.mkdtemp(prefix="gpuhive-noscreen-"))
    bare.chmod(0o755)
    for tool in ("runuser", "sh", "id"):
        (bare / tool).symlink_to(shutil.which(tool) or tool)
    return bare


@pytest.fixture
def hive(
    owner: pwd.struct_passwd, shared_dir: Path, tmp_path: Path, jp_asyncio_loop: Any
) -> Iterator[Hive]:
    sims = {}
    decls = []
    for name in ("jl1", "jl2"):
        sim_name = f"{name}-{uuid.uuid4().hex[:6]}"
        sim = LocalSimHost(sim_name, shared_dir / sim_name, preset("a100x4", sim_name))
        env = sim.env()
        keep = {k: env[k] for k in ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")}
        sims[name] = sim
        decls.append(HostDecl(name, "127.0.0.1", transport="local", extra={"env": keep}))
    decls.append(HostDecl("down", "127.0.0.1", port=free_port(), user=OWNER))
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    log_dir = f"~/.gpuhive/test-{uuid.uuid4().hex[:8]}"
    jobs = Jobs(store.db, log_dir=log_dir)
    pool = HostPool(decls, SshSettings(connect_timeout=2, command_timeout=20))
    yield Hive(jobs, pool, Launcher(pool, jobs, grace=3.0), sims)
    _quit_sessions()
    jp_asyncio_loop.run_until_complete(pool.close())
    store.close()
    shutil.rmtree(Path(owner.pw_dir) / log_dir[2:], ignore_errors=True)


def nvidia_smi_apps(sim: LocalSimHost) -> dict[int, str]:
    """pid -> GPU UUID, as the host's nvidia-smi stand-in reports compute processes."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
        capture_output=True, text=True, env=sim.env(), check=True,
    ).stdout  # fmt: skip
    apps = {}
    for line in out.splitlines():
        pid, gpu = (part.strip() for part in line.split(","))
        apps[int(pid)] = gpu
    return apps


async def test_two_tasks_run_as_owner_on_their_gpus_and_stop_gracefully(hive: Hive) -> None:
    spec = job(
        "python3 -c {probe}",
        template="pytorch",
        options={"mode": "env", "master_port": 29555},
        variables={"probe": PROBE},
    )
    created = await hive.create(spec, hive.slots("jl1", 1), hive.slots("jl2", 2))
    assert [t.state for t in created.tasks] == [TaskState.PENDING] * 2
    assert created.tasks[0].session == f"gpuhive-{created.id}-{spec.name}-0"

    report = await hive.launcher.start(created)
    assert report.ok, report.message
    assert report.job.status == "running"
    assert all(t.handle for t in report.job.tasks)

    async def logged() -> bool:
        chunks = [await hive.launcher.log(t) for t in report.job.tasks]
        return all("{" in c.text for c in chunks)

    await until(logged)
    synced = await hive.launcher.sync()
    assert synced.changed == () and synced.unreachable == {}
    job_now = hive.jobs.get(created.id)
    assert [t.state for t in job_now.tasks] == [TaskState.RUNNING] * 2

    probes = []
    for task, (host, gpu) in zip(job_now.tasks, [("jl1", 1), ("jl2", 2)], strict=True):
        probe = first_json((await hive.launcher.log(task)).text)
        probes.append(probe)
        uuid_ = hive.hosts[host].config.gpus[gpu].uuid
        assert probe["env"]["CUDA_VISIBLE_DEVICES"] == uuid_
        assert probe["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert probe["env"]["RANK"] == str(task.index)
        assert probe["env"]["WORLD_SIZE"] == "2"
        assert probe["cwd"] == pwd.getpwnam(OWNER).pw_dir
        assert user_of(probe["pid"]) == OWNER  # the owner runs it, not the server's account
        assert probe["pgid"] == task.pgid  # the process group recorded at start
        assert nvidia_smi_apps(hive.hosts[host]).get(probe["pid"]) == uuid_

    assert hive.launcher.attach_hint(job_now.tasks[0]) == f"screen -x {job_now.tasks[0].session}"

    stopped = await hive.launcher.stop(created.id)
    assert stopped.failures == {}
    assert [t.state for t in stopped.job.tasks] == [TaskState.STOPPED] * 2
    assert [t.exit_status for t in stopped.job.tasks] == [130, 130]  # SIGINT, exit file written
    assert stopped.job.status == "stopped"
    for task, probe in zip(stopped.job.tasks, probes, strict=True):
        assert not alive(probe["pid"])
        # A sweep taken before the stop still shows its processes: the queue knows they left.
        assert task.pgid is not None and (task.host, task.pgid) in hive.launcher.ended_groups
        assert all((task.host, uuid) in hive.launcher.ended_gpus for uuid in task.gpus)
        assert "got SIGINT" in (await hive.launcher.log(task)).text
    assert not [s for s in sessions() if s.startswith(f"gpuhive-{created.id}-{spec.name}-")]


async def test_exit_status_and_a_session_killed_outside_is_lost(hive: Hive) -> None:
    failing = await hive.create(job("echo bye; exit 3"), hive.slots("jl1", 0))
    sleeper = await hive.create(job("sleep 60"), hive.slots("jl1", 3))
    assert (await hive.launcher.start(failing)).ok
    assert (await hive.launcher.start(sleeper)).ok

    async def failed() -> bool:
        await hive.launcher.sync()
        return hive.jobs.get(failing.id).status == "failed"

    await until(failed)
    task = hive.jobs.get(failing.id).tasks[0]
    assert (task.state, task.exit_status) == (TaskState.FAILED, 3)
    assert task.ended_at is not None
    assert (await hive.launcher.log(task)).text == "bye\n"

    session = hive.jobs.get(sleeper.id).tasks[0].session
    quit_screen = ["runuser", "-u", OWNER, "--", "screen", "-S", session, "-X", "quit"]
    await asyncio.to_thread(subprocess.run, quit_screen, check=True)
    report = await hive.launcher.sync()
    assert [(t.job_id, t.state) for t in report.changed] == [(sleeper.id, TaskState.LOST)]
    lost = hive.jobs.get(sleeper.id)
    assert lost.status == "lost" and "without an exit status" in (lost.tasks[0].last_error or "")


async def test_unreachable_second_host_is_reported_and_the_first_task_stopped(hive: Hive) -> None:
    spec = job("python3 -c {probe}", variables={"probe": PROBE})
    down = ("down", "127.0.0.1", [GpuSlot("down", "127.0.0.1", 0, "GPU-down-0")])
    created = await hive.create(spec, hive.slots("jl1", 0), down)
    report = await hive.launcher.start(created)
    assert not report.ok
    [failure] = report.failures
    assert (failure.index, failure.host) == (1, "down")
    assert "host unavailable" in failure.reason and "refused" in failure.reason
    assert "task 1 on down" in report.message and "were stopped" in report.message
    first, second = report.job.tasks
    assert first.state == TaskState.STOPPED and "task 1 on down" in (first.last_error or "")
    assert second.state == TaskState.FAILED and second.last_error == failure.reason
    assert report.job.status == "failed"
    assert first.session not in sessions()
    assert "got SIGINT" in (await hive.launcher.log(first)).text

    # Asked for it, a partial start keeps the tasks that did start.
    await asyncio.to_thread(hive.jobs.reset, created.id)
    partial = await hive.launcher.start(created.id, partial_ok=True)
    assert [t.state for t in partial.job.tasks] == [TaskState.RUNNING, TaskState.FAILED]
    assert "kept running" in partial.message
    with pytest.raises(Exception, match="stop it first"):
        await asyncio.to_thread(hive.jobs.delete, created.id)
    await hive.launcher.stop(created.id)
    await asyncio.to_thread(hive.jobs.delete, created.id)


async def test_start_failures_are_explained(hive: Hive, owner: pwd.struct_passwd) -> None:
    locked = Jobs(hive.jobs.db, log_dir="/root/gpuhive-not-yours")
    spec = job("true")
    created = await asyncio.to_thread(
        locked.create, spec, render_tasks(spec, [hive.slots("jl1", 0)])
    )
    report = await Launcher(hive.pool, locked).start(created)
    assert "cannot create the log directory /root/gpuhive-not-yours" in report.failures[0].reason

    stranger = Job(name="x", owner="nosuchuser9", command="true")
    created = await hive.create(stranger, hive.slots("jl1", 0))
    report = await hive.launcher.start(created)
    assert "could not run a command as nosuchuser9 on jl1" in report.failures[0].reason

    # A host where the owner has no GNU screen on PATH.
    bare = bin_without_screen()
    pool = HostPool([HostDecl("bare", transport="local", extra={"env": {"PATH": str(bare)}})])
    slot = ("bare", "127.0.0.1", [GpuSlot("bare", "127.0.0.1", 0, "GPU-bare-0")])
    created = await hive.create(job("true"), slot)
    report = await Launcher(pool, hive.jobs).start(created)
    assert report.failures[0].reason == f"GNU screen is not installed on bare for {OWNER}"
    shutil.rmtree(bare)

    running = await hive.create(job("sleep 30"), hive.slots("jl2", 0))
    assert (await hive.launcher.start(running)).ok
    with pytest.raises(Exception, match="already running"):
        await hive.launcher.start(running.id)
    await hive.launcher.stop(running.id)


async def test_values_with_quotes_substitutions_and_newlines_arrive_verbatim(
    hive: Hive, owner: pwd.struct_passwd
) -> None:
    nasty = ["it's", 'say "hi"', "$(touch pwned1)", "`touch pwned2`", "a; touch pwned3",
             "line1\nline2", "$HOME ${PATH}", "back\\slash", "{b}", "-n", "*", "~"]  # fmt: skip
    variables = {f"v{i}": value for i, value in enumerate(nasty)}
    fields = " ".join(f"{{v{i}}}" for i in range(len(nasty)))
    spec = job(
        f"SLEEP=0 python3 -c {{probe}} {fields}",
        name="it's a $(job)\nname",
        variables={"probe": PROBE, **variables},
        env={"NOTE": "x'y\"z $(touch pwned4) `id` \n end"},
        workdir="/tmp",
    )
    created = await hive.create(spec, hive.slots("jl1", 2))
    assert (await hive.launcher.start(created)).ok

    async def done() -> bool:
        await hive.launcher.sync()
        return hive.jobs.get(created.id).status == "succeeded"

    await until(done)
    task = hive.jobs.get(created.id).tasks[0]
    probe = first_json((await hive.launcher.log(task)).text)
    assert probe["argv"] == nasty
    assert probe["env"]["NOTE"] == spec.env["NOTE"]
    assert probe["cwd"] == "/tmp"
    for place in (Path(owner.pw_dir), Path("/tmp"), Path.cwd()):
        assert not list(place.glob("pwned*"))


async def test_log_offsets_tail_and_characters_cut_in_half(hive: Hive) -> None:
    text = "".join(f"line {i} żółw ☃\n" for i in range(20))
    spec = job("printf %s {text}", variables={"text": text})
    created = await hive.create(spec, hive.slots("jl2", 1))
    assert (await hive.launcher.start(created)).ok
    task = created.tasks[0]

    async def finished() -> bool:
        await hive.launcher.sync()
        return hive.jobs.get(created.id).status == "succeeded"

    await until(finished)
    data = text.encode()
    whole = await hive.launcher.log(task)
    assert (whole.text, whole.start, whole.next_offset, whole.size) == (
        text,
        0,
        len(data),
        len(data),
    )
    assert whole.complete

    # Follow it in small chunks that end inside multi-byte characters: nothing is lost.
    pieces, offset = [], 0
    while offset < len(data):
        chunk = await hive.launcher.log(task, offset=offset, limit=7)
        assert chunk.next_offset > offset
        pieces.append(chunk.text)
        offset = chunk.next_offset
    assert "".join(pieces) == text

    last = await hive.launcher.log(task, tail=12)
    assert text.endswith(last.text) and last.next_offset == len(data)
    assert (await hive.launcher.log(task, offset=len(data) + 50)).text == ""


async def test_stop_escalates_when_sigint_is_ignored_and_pending_jobs_just_stop(
    hive: Hive,
) -> None:
    stubborn = await hive.create(
        job("trap '' INT; sleep 60 & wait; sleep 60"), hive.slots("jl1", 1)
    )
    assert (await hive.launcher.start(stubborn)).ok
    report = await hive.launcher.stop(stubborn.id, grace=0.5)
    task = report.job.tasks[0]
    assert task.state == TaskState.STOPPED
    assert task.session not in sessions()

    waiting = await hive.create(job("true"), hive.slots("jl1", 1))
    report = await hive.launcher.stop(waiting.id)
    assert report.job.status == "stopped"
    assert report.job.tasks[0].last_error == "stopped before it started"
    # the queue chose it before the stop: its start afterwards finds nothing pending to start
    with pytest.raises(Conflict, match="changed while it was being started"):
        await hive.launcher.start(waiting.id, only_pending=True)
    assert (await asyncio.to_thread(hive.jobs.get, waiting.id)).status == "stopped"


async def test_sync_costs_one_command_per_host_and_owner(hive: Hive) -> None:
    created = await hive.create(
        job("sleep 30", options={"per_gpu": True}),
        hive.slots("jl1", 0, 1, 2),
        hive.slots("jl2", 0, 1),
    )
    assert len(created.tasks) == 5
    assert (await hive.launcher.start(created)).ok
    calls: list[str] = []
    real_run = hive.pool.run

    async def counting(host: str, command: str, **kwargs: Any) -> Any:
        calls.append(host)
        return await real_run(host, command, **kwargs)

    hive.pool.run = counting  # type: ignore[method-assign]
    try:
        report = await hive.launcher.sync()
    finally:
        hive.pool.run = real_run  # type: ignore[method-assign]
    assert report.changed == () and sorted(calls) == ["jl1", "jl2"]
    await hive.launcher.stop(created.id)


def test_over_real_sshd_as_the_owner(owner: pwd.struct_passwd) -> None:
    async def scenario(cluster: SshdCluster, store: Store) -> None:
        host = cluster["js1"]
        decl = HostDecl("js1", host.address, port=host.port)
        settings = SshSettings(
            client_keys=[str(cluster.client_key)], known_hosts=[str(cluster.known_hosts)]
        )
        pool = HostPool([decl], settings)
        jobs = Jobs(store.db, log_dir=f"~/{log_dir}")
        launcher = Launcher(pool, jobs, grace=3.0)
        try:
            gpu = cluster.host_config("js1").gpus[1]
            spec = job("python3 -c {probe}", variables={"probe": PROBE})
            slots = [("js1", host.address, [GpuSlot("js1", host.address, 1, gpu.uuid)])]
            created = await asyncio.to_thread(jobs.create, spec, render_tasks(spec, slots))
            assert (await launcher.start(created)).ok
            task = created.tasks[0]

            async def logged() -> bool:
                return "{" in (await launcher.log(task)).text

            await until(logged)
            probe = first_json((await launcher.log(task)).text)
            assert user_of(probe["pid"]) == OWNER
            assert probe["env"]["CUDA_VISIBLE_DEVICES"] == gpu.uuid
            assert (await launcher.sync()).changed == ()
            hint = launcher.attach_hint(task)
            assert hint == f"ssh -t -p {host.port} {OWNER}@127.0.0.1 screen -x {task.session}"
            stopped = await launcher.stop(created.id)
            assert [(t.state, t.exit_status) for t in stopped.job.tasks] == [
                (TaskState.STOPPED, 130)
            ]
            assert not alive(probe["pid"])
        finally:
            await pool.close()

    log_dir = f".gpuhive/test-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, SshdCluster(["js1"]) as cluster:
        cluster.add_user(OWNER)
        store = Store(f"sqlite:///{tmp}/hive.sqlite").open()
        try:
            asyncio.run(asyncio.wait_for(scenario(cluster, store), 40))
        finally:
            store.close()
            _quit_sessions()
            shutil.rmtree(Path(owner.pw_dir) / log_dir, ignore_errors=True)
