"""Fixtures that start simulated GPU hosts: local stand-ins, real sshd clusters, real users."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost, SshdCluster
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import ensure_user, is_root

TEST_USERS = ("gh-alice", "gh-bob")  # at most 8 characters: `ps -o user=` truncates longer


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A temporary directory every UNIX user can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gpuhive-simtest-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_local_host(shared_dir: Path) -> Callable[..., LocalSimHost]:
    """Factory of local simulated hosts with unique names (so tests never see each other's GPUs)."""

    def make(profile: str = "a100x4", *, sample_uuids: bool = False) -> LocalSimHost:
        name = f"sim-{uuid.uuid4().hex[:10]}"
        config = preset(profile, name, sample_uuids=sample_uuids)
        return LocalSimHost(name, shared_dir / name, config)

    return make


@pytest.fixture
def gpu_processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A list tests append their GPU processes to; each is killed with its children afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # each runs in its own session: children too
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def sim_users() -> tuple[str, ...]:
    """Two real UNIX test users that may log in to simulated hosts."""
    if not is_root():
        pytest.skip("creating UNIX users needs root")
    for name in TEST_USERS:
        ensure_user(name)
    return TEST_USERS


@pytest.fixture(scope="module")
def sshd_cluster() -> Iterator[SshdCluster]:
    """Three real sshd hosts (gpu1..gpu3, four simulated A100 each), shared by a test module."""
    if shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    with SshdCluster(3) as cluster:
        if is_root():
            for name in TEST_USERS:
                cluster.add_user(name)
        yield cluster


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., SshdCluster]]:
    """Factory of private sshd clusters for tests that break hosts; all stopped afterwards."""
    clusters: list[SshdCluster] = []

    def make(hosts: int = 1, **kwargs: Any) -> SshdCluster:
        cluster = SshdCluster(hosts, **kwargs).start()
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def run_smi() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a host's nvidia-smi stand-in (as `user` when given) and capture its output."""

    def run(
        host: LocalSimHost, *args: str, timeout: float = 20, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = host.env()
        ids: dict[str, Any] = {}
        if user:
            account = pwd.getpwnam(user)
            env = {**env, "HOME": account.pw_dir, "USER": user}
            groups = os.getgrouplist(user, account.pw_gid)
            ids = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": groups}
        return subprocess.run(
            [str(host.bin_dir / "nvidia-smi"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd="/",
            **ids,
        )

    return run
