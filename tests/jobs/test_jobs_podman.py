"""Container jobs with rootless Podman as a real test user (#29), through the real launcher.

Podman runs as the job's owner from their screen session, with their own storage (the image
is imported into it for this test only). Here rootless networking (slirp4netns) has no
/dev/net/tun, so only the default `network: host` (or `none`) works, and catatonit is not
installed, so the host says `init_path: /usr/bin/tini-static`, as a site would.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.model.containers import ContainerSpec
from jupyter_gpuhive.model.jobs import Job, TaskState
from jupyter_gpuhive.sim.cluster import ensure_user
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs
from tests.support.containers import tools_rootfs
from tests.support.waiting import until

PODMAN, INIT = "/usr/bin/podman", "/usr/bin/tini-static"
OWNER = "hivepod1"
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(PODMAN, os.X_OK) or not os.access(INIT, os.X_OK),
    reason="needs root (to act as a test user), podman and tini (make sysdeps)",
)


def as_owner(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    account = pwd.getpwnam(OWNER)
    env = {"HOME": account.pw_dir, "PATH": "/usr/bin:/bin", "USER": OWNER}
    return subprocess.run(["/usr/sbin/runuser", "-u", OWNER, "--", PODMAN, *args], input=stdin,
                          env=env, cwd="/", capture_output=True, timeout=120, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    ensure_user(OWNER)
    if f"{OWNER}:" not in Path("/etc/subuid").read_text():
        pytest.skip(f"{OWNER} has no /etc/subuid range (rootless Podman needs one)")
    tag = f"localhost/gpuhive-pod-{uuid.uuid4().hex[:8]}"
    buffer = Path(pwd.getpwnam(OWNER).pw_dir) / f".{uuid.uuid4().hex[:8]}.tar"
    with open(buffer, "wb") as out:
        tools_rootfs().write(out)
    done = as_owner("import", "-q", "-", tag, stdin=buffer.read_bytes())
    buffer.unlink()
    assert done.returncode == 0, done.stderr.decode()
    yield tag
    as_owner("rm", "-a", "-f", "-t", "0")
    as_owner("rmi", "-f", tag)


@pytest.fixture
def hive(tmp_path: Path, image: str, jp_asyncio_loop: Any) -> Iterator[tuple[Jobs, Launcher]]:
    engine = {"engine": "podman", "binary": PODMAN, "gpu_flags": "none", "init_path": INIT,
              "images": ["localhost/gpuhive-pod-*"]}  # fmt: skip
    decl = HostDecl("pod1", "127.0.0.1", transport="local", extra={"containers": engine})
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    log_dir = f"~/.gpuhive/test-{uuid.uuid4().hex[:8]}"
    jobs = Jobs(store.db, log_dir=log_dir)
    pool = HostPool([decl], SshSettings(connect_timeout=2, command_timeout=60))
    yield jobs, Launcher(pool, jobs, grace=2.0)
    jp_asyncio_loop.run_until_complete(pool.close())
    store.close()
    shutil.rmtree(Path(pwd.getpwnam(OWNER).pw_dir) / log_dir[2:], ignore_errors=True)


async def test_a_rootless_podman_job_runs_as_its_owner_and_stops(hive, image) -> None:
    jobs, launcher = hive
    layout = [("pod1", "127.0.0.1", [GpuSlot("pod1", "127.0.0.1", 0, "GPU-pod1-0")])]
    code = 'echo "in $(id -u):$(id -g) $CUDA_VISIBLE_DEVICES $SECRET"; exec sleep 60'
    spec = Job(name="pod", owner=OWNER, command=code, env={"SECRET": "s3cret"},
               container=ContainerSpec(image))  # fmt: skip
    job = await asyncio.to_thread(jobs.create, spec, render_tasks(spec, layout))
    report = await launcher.start(job)
    assert report.ok, report.message
    [task] = job.tasks

    async def said() -> Any:
        text = (await launcher.log(task)).text
        return text if "in " in text else None

    account = pwd.getpwnam(OWNER)
    text = await until(said, timeout=30)
    assert f"in {account.pw_uid}:{account.pw_gid} GPU-pod1-0 s3cret" in text
    running = as_owner("ps", "--format", "{{.Names}} {{.Labels}}").stdout.decode()
    assert task.session in running and f"gpuhive.owner:{OWNER}" in running

    stopped = await launcher.stop(job.id)
    assert [t.state for t in stopped.job.tasks] == [TaskState.STOPPED]
    assert task.session not in as_owner("ps", "-a", "--format", "{{.Names}}").stdout.decode()
