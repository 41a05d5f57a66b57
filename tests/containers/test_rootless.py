"""Rootless Podman as a real test user (#29): its processes are charged to that user, also
those that run as another uid inside (a subordinate uid of hers, from /etc/subuid).

Here (cgroup v1, no systemd) rootless Podman makes no cgroup per container, so the container
is not named; with systemd on cgroup v2 its `libpod-<id>.scope` under the user's slice names
it (tests/containers/test_cgroups.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.protection.service import ProtectionSettings
from tests.protection.conftest import SIM_ENV, USER_MAP
from tests.support.containers import tools_rootfs
from tests.support.waiting import until

PODMAN = "/usr/bin/podman"
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(PODMAN, os.X_OK),
    reason="needs root (to act as a test user) and podman (make sysdeps)",
)


@pytest.fixture
def podman_as_alice(sim_users: tuple[str, ...]) -> Iterator[Any]:
    """`podman(*args)` as gh-alice, with storage and runtime folders of this test only."""
    home = Path(tempfile.mkdtemp(prefix="gpuhive-podman-"))
    shutil.chown(home, "gh-alice", "gh-alice")
    home.chmod(0o700)
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(home / "run"), "PATH": "/usr/bin:/bin",
           "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config")}  # fmt: skip

    def podman(*args: str, stdin: bytes | None = None) -> str:
        done = subprocess.run(
            ["/usr/sbin/runuser", "-u", "gh-alice", "--", PODMAN, *args], input=stdin, env=env, cwd="/",
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    subprocess.run(["/usr/sbin/runuser", "-u", "gh-alice", "--", "/usr/bin/mkdir", "-m", "700",
                    env["XDG_RUNTIME_DIR"]], check=True)  # fmt: skip
    tar = home / "rootfs.tar"
    with open(tar, "wb") as out:
        tools_rootfs().write(out)
    podman("import", "-q", "-", "localhost/gpuhive-tools", stdin=tar.read_bytes())
    yield podman
    subprocess.run(["/usr/sbin/runuser", "-u", "gh-alice", "--", PODMAN, "rm", "-a", "-f", "-t", "0"],
                   env=env, cwd="/", capture_output=True, timeout=60, check=False)  # fmt: skip
    subprocess.run(["/usr/sbin/runuser", "-u", "gh-alice", "--", PODMAN, "system", "reset", "-f"],
                   env=env, cwd="/", capture_output=True, timeout=60, check=False)  # fmt: skip
    shutil.rmtree(home, ignore_errors=True)


def first_subuid(user: str) -> int:
    lines = Path("/etc/subuid").read_text().splitlines()
    return int(next(line for line in lines if line.startswith(f"{user}:")).split(":")[1])


async def test_rootless_podman_processes_are_their_users_and_she_stops_them(
    podman_as_alice, make_local_host, make_rig
) -> None:
    host = make_local_host()
    env = host.env()
    decl = HostDecl(host.name, transport="local", extra={"env": {k: env[k] for k in SIM_ENV}})
    settings = ProtectionSettings(
        level=1, user_map=USER_MAP, handlers={"kill": {"mode": "user"}},
        ladder=[{"after": 0, "handler": "kill", "signal": "KILL"}],
    )  # fmt: skip
    rig = make_rig([decl], settings)
    await rig.sweep()  # discovery fills the inventory
    await asyncio.to_thread(rig.reserve, "bob", f"{host.name}:0")
    gpu = ["-e", f"GPUHIVE_SIM_HOST={host.name}", "-e", "CUDA_VISIBLE_DEVICES=0"]
    for user in ("0", "1000"):  # her own uid outside; a subordinate uid of hers
        podman_as_alice("run", "-d", "--network", "none", "--user", user, *gpu,
                        "localhost/gpuhive-tools", "sleep", "300")  # fmt: skip
    sample = (await rig.sweep()).samples[host.name]
    seen = sorted((p.user, p.container.source if p.container else "") for p in sample.processes)
    assert seen == [("gh-alice", ""), ("gh-alice", "subuid")]
    (inside,) = [p for p in sample.processes if p.container]
    assert inside.container.process_user == str(first_subuid("gh-alice") + 999)  # 1000 inside

    # On bob's GPU both are hers: one violation, and the kill step, as her, stops both.
    await until(lambda: [v for v in rig.history() if v.actions], timeout=20)
    await rig.protection.actions.drain()
    (violation,) = rig.history()
    assert (violation.offender, violation.holder) == ("gh-alice", "bob")
    pids = sorted(p.pid for p in sample.processes)
    assert violation.pids == tuple(pids)
    (kill,) = violation.actions
    assert kill.outcome == "ok" and kill.detail.startswith(f"SIGKILL sent to {pids[0]}, {pids[1]}")
    await until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), timeout=20)
