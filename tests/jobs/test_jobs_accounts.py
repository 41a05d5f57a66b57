"""Jobs run as the owner's mapped UNIX account (`unix_users`, issue #41 finding 3): real
accounts, real screen sessions, over `local` and real sshd; the checkpoint folder is made by
that account, 0700, and a link or folder another real user planted there is refused."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.jobs.preemption import checkpoint_dir
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.model.accounts import unix_account
from jupyter_gpuhive.model.jobs import Job, TaskState
from jupyter_gpuhive.sim.cluster import LocalSimHost, SshdCluster
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import ensure_user, is_root
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs
from tests.support.waiting import until

pytestmark = [
    pytest.mark.skipif(not is_root(), reason="runs tasks as real test users (needs root)"),
    pytest.mark.skipif(shutil.which("screen") is None, reason="needs GNU screen"),
]

USER = "acbob"  # the gpuhive user; a UNIX account of that name exists too (the old mistake ran)
ACCOUNT = "hs-acbob"  # c.GpuHiveApp.unix_users = {"acbob": "hs-acbob"}
MALLORY = "acmal"  # another local user
MAP = {USER: ACCOUNT}

# Prints who it runs as and where its checkpoint folder is, touches a file there, waits.
PROBE = """\
import json, os, pathlib, time
ckpt = os.environ["GPUHIVE_CHECKPOINT_DIR"]
pathlib.Path(ckpt, "ran").write_text("x")
print(json.dumps({"pid": os.getpid(), "uid": os.getuid(), "home": os.environ["HOME"],
                  "ckpt": ckpt}), flush=True)
time.sleep(60)
"""


def as_user(user: str, *argv: str) -> None:
    """Run `argv` as `user` (a real process of that account)."""
    subprocess.run(["runuser", "-u", user, "--", *argv], check=True, timeout=30)


def quit_sessions(user: str) -> None:
    listed = subprocess.run(["runuser", "-u", user, "--", "screen", "-ls"],
                            capture_output=True, text=True).stdout  # fmt: skip
    for line in listed.splitlines():
        if line.startswith("\t") and ".gpuhive-" in line:
            name = line.split()[0]
            subprocess.run(["runuser", "-u", user, "--", "screen", "-S", name, "-X", "quit"])


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, pwd.struct_passwd]]:
    made = {name: ensure_user(name) for name in (USER, ACCOUNT, MALLORY)}
    yield made
    for name in (USER, ACCOUNT):
        quit_sessions(name)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may write, sticky, like /scratch or /tmp."""
    path = Path(tempfile.mkdtemp(prefix="gpuhive-scratch-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Rig:
    """A store, a pool over one simulated local host, and a launcher with the site's map."""

    def __init__(self, tmp: Path, shared: Path, log_dir: str) -> None:
        name = f"ac-{uuid.uuid4().hex[:6]}"
        self.sim = LocalSimHost(name, shared / "sim", preset("a100x4", name))
        env = self.sim.env()
        keep = {k: env[k] for k in ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")}
        decl = HostDecl("ac1", "127.0.0.1", transport="local", extra={"env": keep})
        self.store = Store(f"sqlite:///{tmp / 'hive.sqlite'}").open()
        self.jobs = Jobs(self.store.db, log_dir=log_dir)
        self.pool = HostPool([decl], SshSettings(connect_timeout=2, command_timeout=20))
        mapping = functools.partial(unix_account, MAP)  # the one the server uses
        self.launcher = Launcher(self.pool, self.jobs, grace=2.0, unix_user=mapping)

    async def create(self) -> Job:
        spec = Job(name=f"a{uuid.uuid4().hex[:6]}", owner=USER, command="python3 -c {probe}",
                   variables={"probe": PROBE}, preemptible=True)  # fmt: skip
        uuid0 = self.sim.config.gpus[0].uuid
        slots = [("ac1", "127.0.0.1", [GpuSlot("ac1", "127.0.0.1", 0, uuid0)])]
        return await asyncio.to_thread(self.jobs.create, spec, render_tasks(spec, slots))

    async def ended(self, job_id: int) -> Job:
        async def over() -> bool:
            await self.launcher.sync()
            return not (await asyncio.to_thread(self.jobs.get, job_id)).tasks[0].active

        await until(over, timeout=20)
        return await asyncio.to_thread(self.jobs.get, job_id)


@pytest.fixture
def rig(
    accounts: dict[str, pwd.struct_passwd], shared: Path, tmp_path: Path, jp_asyncio_loop: Any
) -> Iterator[Rig]:
    made = Rig(tmp_path, shared, f"{shared}/{{user}}/jobs")
    yield made
    quit_sessions(ACCOUNT)
    quit_sessions(USER)
    jp_asyncio_loop.run_until_complete(made.pool.close())
    made.store.close()


async def first_json(rig: Rig, job: Job) -> dict[str, Any]:
    async def printed() -> bool:
        return "{" in (await rig.launcher.log(job.tasks[0])).text

    await until(printed, timeout=20)
    text = (await rig.launcher.log(job.tasks[0])).text
    return dict(json.loads(next(line for line in text.splitlines() if line.startswith("{"))))


async def test_a_job_runs_as_the_mapped_account_and_makes_its_checkpoint_folder_0700(
    rig: Rig, accounts: dict[str, pwd.struct_passwd], shared: Path
) -> None:
    mapped = accounts[ACCOUNT]
    job = await rig.create()
    assert (await rig.launcher.start(job)).ok
    seen = await first_json(rig, job)
    # Root reads the process's owner from /proc: not what the process says of itself.
    assert os.stat(f"/proc/{seen['pid']}").st_uid == mapped.pw_uid == seen["uid"]
    assert seen["home"] == mapped.pw_dir
    ckpt = Path(seen["ckpt"])
    assert ckpt == Path(checkpoint_dir(job, f"{shared}/{{user}}/jobs", ACCOUNT))
    assert ckpt.is_relative_to(shared / ACCOUNT)
    info = os.lstat(ckpt)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == mapped.pw_uid
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert (await rig.launcher.sync()).changed == ()  # its screen session is the account's
    stopped = await rig.launcher.stop(job.id)
    assert stopped.job.tasks[0].state == TaskState.STOPPED


@pytest.mark.parametrize(
    ("planted", "why"),
    [("link", "it is a link"), ("folder", "it belongs to another account")],
)
async def test_a_checkpoint_folder_another_user_planted_is_refused_not_followed(
    rig: Rig, accounts: dict[str, pwd.struct_passwd], shared: Path, planted: str, why: str
) -> None:
    job = await rig.create()
    ckpt = Path(checkpoint_dir(job, f"{shared}/{{user}}/jobs", ACCOUNT))
    loot = shared / "loot"
    # Mallory, a real process of hers, squats the account's folder in the shared place first.
    as_user(MALLORY, "mkdir", "-m", "777", "-p", str(loot), str(ckpt.parent))
    if planted == "link":
        as_user(MALLORY, "ln", "-s", str(loot), str(ckpt))
    else:
        as_user(MALLORY, "mkdir", "-m", "777", str(ckpt))
    assert (await rig.launcher.start(job)).ok  # the screen session starts; the task refuses
    done = await rig.ended(job.id)
    task = done.tasks[0]
    assert (task.state, task.exit_status) == (TaskState.FAILED, 1)
    log = (await rig.launcher.log(task)).text
    assert f"gpuhive: refused the checkpoint folder {ckpt}: {why}" in log, log
    assert list(loot.iterdir()) == [] and not (ckpt / "ran").exists()
    assert os.lstat(ckpt).st_uid == accounts[MALLORY].pw_uid  # left as it was


def test_over_real_sshd_the_job_logs_in_as_the_mapped_account(
    accounts: dict[str, pwd.struct_passwd],
) -> None:
    mapped = accounts[ACCOUNT]
    log_dir = f".gpuhive/test-{uuid.uuid4().hex[:8]}"

    async def scenario(cluster: SshdCluster, store: Store) -> None:
        host = cluster["as1"]
        settings = SshSettings(
            client_keys=[str(cluster.client_key)], known_hosts=[str(cluster.known_hosts)]
        )
        pool = HostPool([HostDecl("as1", host.address, port=host.port)], settings)
        jobs = Jobs(store.db, log_dir=f"~/{log_dir}")
        launcher = Launcher(pool, jobs, grace=2.0, unix_user=functools.partial(unix_account, MAP))
        try:
            gpu = cluster.host_config("as1").gpus[0]
            spec = Job(name=f"s{uuid.uuid4().hex[:6]}", owner=USER, command="python3 -c {p}",
                       variables={"p": PROBE}, preemptible=True)  # fmt: skip
            slots = [("as1", host.address, [GpuSlot("as1", host.address, 0, gpu.uuid)])]
            job = await asyncio.to_thread(jobs.create, spec, render_tasks(spec, slots))
            assert (await launcher.start(job)).ok
            task = job.tasks[0]

            async def printed() -> bool:
                return "{" in (await launcher.log(task)).text

            await until(printed, timeout=20)
            text = (await launcher.log(task)).text
            seen = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
            assert os.stat(f"/proc/{seen['pid']}").st_uid == mapped.pw_uid
            assert seen["home"] == mapped.pw_dir
            assert Path(seen["ckpt"]).is_relative_to(mapped.pw_dir)
            assert os.lstat(seen["ckpt"]).st_uid == mapped.pw_uid
            hint = launcher.attach_hint(task)
            assert f" {ACCOUNT}@{host.address} " in hint, hint
            await launcher.stop(job.id)
        finally:
            await pool.close()

    with tempfile.TemporaryDirectory() as tmp, SshdCluster(["as1"]) as cluster:
        cluster.add_user(ACCOUNT)  # gpuhive's key opens hs-acbob only, not acbob
        store = Store(f"sqlite:///{tmp}/hive.sqlite").open()
        try:
            asyncio.run(asyncio.wait_for(scenario(cluster, store), 60))
        finally:
            store.close()
            quit_sessions(ACCOUNT)
            shutil.rmtree(Path(mapped.pw_dir) / log_dir, ignore_errors=True)
