"""The host backend seam is real: a backend written only against `hosts.backends`
(tests/support/otherbackend.py: setpriv, channels of its own), registered at run time, runs a
sweep of a simulated host, and a job as its owner on its GPUs."""

from __future__ import annotations

import pwd
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.hosts import backends
from jupyter_gpuhive.hosts.config import parse_host
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.model.jobs import TaskState
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import ensure_user, is_root
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs
from tests.jobs.test_jobs_launcher import (  # noqa: F401 - the owner fixture
    PROBE,
    Hive,
    first_json,
    job,
    owner,
    user_of,
)
from tests.support.otherbackend import NAME, SetprivBackend
from tests.support.waiting import until

OWNER = "gpuhive-seam"
pytestmark = pytest.mark.skipif(not is_root(), reason="runs commands as another user")


@pytest.fixture
def registered() -> Iterator[None]:
    backends.register(NAME, SetprivBackend)
    yield
    backends.unregister(NAME)


def hive_over(transport: str, host: str, home: Path, tmp_path: Path, loop: Any) -> Iterator[Hive]:
    """A Hive with one simulated host `host` reached through backend `transport`; what its
    jobs leave in `home` (the owner's) and the simulated host's files go at the end."""
    shared = Path(tempfile.mkdtemp(prefix="gpuhive-seam-"))
    shared.chmod(0o755)
    name = f"{host}-{uuid.uuid4().hex[:6]}"
    sim = LocalSimHost(name, shared / name, preset("a100x4", name))
    env = sim.env()
    keep = {k: env[k] for k in ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")}
    decl = parse_host({"name": host, "transport": transport, "env": keep, "gpu_count": 4})
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    log_dir = f"~/.gpuhive/seam-{uuid.uuid4().hex[:8]}"
    jobs = Jobs(store.db, log_dir=log_dir)
    pool = HostPool([decl], SshSettings(command_timeout=20))
    yield Hive(jobs, pool, Launcher(pool, jobs, grace=3.0), {host: sim})
    loop.run_until_complete(pool.close())
    store.close()
    shutil.rmtree(home / log_dir[2:], ignore_errors=True)
    shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture
def seam_hive(registered: None, tmp_path: Path, jp_asyncio_loop: Any) -> Iterator[Hive]:
    home = Path(ensure_user(OWNER).pw_dir)
    yield from hive_over(NAME, "sp1", home, tmp_path, jp_asyncio_loop)


async def test_the_backend_is_chosen_by_the_hosts_transport(seam_hive: Hive) -> None:
    backend = seam_hive.pool.backend("sp1")
    assert isinstance(backend, SetprivBackend)
    assert NAME in backends.backend_names()
    done = await seam_hive.pool.run("sp1", "id -un; printenv GPUHIVE_SIM_HOST", user=OWNER)
    assert done.stdout.split() == [OWNER, seam_hive.hosts["sp1"].name]


async def test_a_sweep_through_the_other_backend(seam_hive: Hive) -> None:
    sweep = await Sampler(seam_hive.pool, interval=5, timeout=10).sweep()
    assert sweep.failures == {}
    sample = sweep.samples["sp1"]
    uuids = [g.uuid for g in seam_hive.hosts["sp1"].config.gpus]
    assert sorted(g.uuid for g in sample.gpus) == sorted(uuids)


async def test_a_job_through_the_other_backend(
    seam_hive: Hive,
    owner: pwd.struct_passwd,  # noqa: F811 - the imported fixture
) -> None:
    spec = job("python3 -c {probe}", template="pytorch",
               options={"mode": "env", "master_port": 29561}, variables={"probe": PROBE})  # fmt: skip
    created = await seam_hive.create(spec, seam_hive.slots("sp1", 2))
    report = await seam_hive.launcher.start(created)
    assert report.ok, report.message
    task = report.job.tasks[0]

    async def said() -> bool:
        return "{" in (await seam_hive.launcher.log(task)).text

    await until(said)
    seen = first_json((await seam_hive.launcher.log(task)).text)
    assert user_of(seen["pid"]) == created.owner == owner.pw_name
    gpu = seam_hive.hosts["sp1"].config.gpus[2].uuid
    assert gpu in (seen["env"]["CUDA_VISIBLE_DEVICES"] or "")
    assert (await seam_hive.launcher.sync()).unreachable == {}
    stopped = await seam_hive.launcher.stop(created)
    assert {t.state for t in stopped.job.tasks} <= {TaskState.STOPPED, TaskState.SUCCEEDED}
    assert seam_hive.launcher.attach_hint(task).startswith("screen -x ")
