"""Real sshd hosts on loopback: identity per host, real users, GPU processes, faults."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time

import asyncssh
import pytest

from jupyter_gpuhive.hosts.vendors import nvidia_smi as nvsmi

QUERY = "--query-gpu=" + ",".join(nvsmi.QUERY_GPU_FIELDS)
APPS = "--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits"


def owner(pid: int) -> str:
    return subprocess.run(
        ["ps", "-o", "user=", "-p", str(pid)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_each_host_has_its_own_identity(sshd_cluster) -> None:
    seen = {}
    for host in sshd_cluster:
        result = sshd_cluster.ssh(host.name, "root", "nvidia-smi -L && printenv GPUHIVE_SIM_HOST")
        assert result.returncode == 0, result.stderr
        *listing, sim_host = result.stdout.splitlines()
        assert sim_host == host.sim_host == host.name
        gpus = nvsmi.parse_gpu_list("\n".join(listing))
        assert [g.uuid for g in gpus] == [g.uuid for g in sshd_cluster.host_config(host.name).gpus]
        seen[host.name] = {g.uuid for g in gpus}
    assert len(set().union(*seen.values())) == 4 * len(sshd_cluster)  # UUIDs unique cluster-wide
    assert len({h.port for h in sshd_cluster}) == len(sshd_cluster)


def test_real_users_log_in(sshd_cluster, sim_users) -> None:
    for user in sim_users:
        result = sshd_cluster.ssh("gpu2", user, ["id", "-un"])
        assert (result.returncode, result.stdout.strip()) == (0, user)


def test_gpu_process_started_over_ssh_shows_its_owner(sshd_cluster, sim_users) -> None:
    alice, bob = sim_users
    uuid = sshd_cluster.host_config("gpu1").gpus[1].uuid
    start = "CUDA_VISIBLE_DEVICES=1 GPUHIVE_SIM_MEM_MIB=321 sleep 120 </dev/null >/dev/null 2>&1 &"
    start += " echo $!"
    started = sshd_cluster.ssh("gpu1", alice, start)
    pid = int(started.stdout)
    try:
        assert owner(pid) == alice
        rows = sshd_cluster.ssh("gpu1", "root", f"nvidia-smi {APPS}").stdout
        assert f"{pid}, {uuid}, 321" in rows.splitlines()
        assert str(pid) not in sshd_cluster.ssh("gpu2", "root", f"nvidia-smi {APPS}").stdout
        assert sshd_cluster.ssh("gpu1", bob, ["kill", str(pid)]).returncode != 0
        assert sshd_cluster.ssh("gpu1", alice, ["kill", str(pid)]).returncode == 0
        for _ in range(50):
            if str(pid) not in sshd_cluster.ssh("gpu1", "root", f"nvidia-smi {APPS}").stdout:
                break
            time.sleep(0.1)
        else:
            pytest.fail("killed process still listed")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_asyncssh_round_trip(sshd_cluster) -> None:
    host = sshd_cluster["gpu3"]

    async def probe() -> tuple[str, str]:
        async with asyncssh.connect(**host.asyncssh_options("root")) as conn:
            csv = await conn.run(f"nvidia-smi {QUERY} --format=csv,nounits", check=True)
            xml = await conn.run("nvidia-smi -q -x", check=True)
            return str(csv.stdout), str(xml.stdout)

    csv, xml = asyncio.run(asyncio.wait_for(probe(), 20))
    expected = [g.uuid for g in sshd_cluster.host_config("gpu3").gpus]
    assert [g.uuid for g in nvsmi.parse_query_gpu(csv)] == expected
    assert [g.uuid for g in nvsmi.parse_query_xml(xml).gpus] == expected


def test_fault_knobs_over_ssh(sshd_cluster) -> None:
    try:
        sshd_cluster.set_fault("gpu3", driver_failure=True)
        failed = sshd_cluster.ssh("gpu3", "root", "nvidia-smi -L")
        assert failed.returncode == 9
        with pytest.raises(nvsmi.NvsmiDriverError):
            nvsmi.parse_gpu_list(failed.stdout)
        assert sshd_cluster.ssh("gpu2", "root", "nvidia-smi -L").returncode == 0
        sshd_cluster.set_fault("gpu3", driver_failure=False, delay_s=0.5)
        started = time.monotonic()
        assert sshd_cluster.ssh("gpu3", "root", "nvidia-smi -L").returncode == 0
        assert time.monotonic() - started >= 0.5
    finally:
        sshd_cluster.clear_faults("gpu3")


def test_stop_breaks_open_connections_and_start_restores(make_cluster) -> None:
    cluster = make_cluster(2)
    host = cluster["gpu1"]
    port = host.port

    async def scenario() -> None:
        async with asyncssh.connect(**host.asyncssh_options("root")) as conn:
            assert (await conn.run("true")).exit_status == 0
            cluster.stop_host("gpu1")
            with pytest.raises((asyncssh.Error, OSError)):
                await asyncio.wait_for(conn.run("true", check=True), 5)

    asyncio.run(scenario())
    assert not host.running
    assert cluster.ssh("gpu1", "root", "true").returncode == 255
    assert cluster.ssh("gpu2", "root", "true").returncode == 0
    cluster.start_host("gpu1")
    assert host.port == port
    assert cluster.ssh("gpu1", "root", "true").returncode == 0  # same key: strict check passes


def test_rotated_host_key_fails_strict_verification(make_cluster) -> None:
    cluster = make_cluster(1)
    cluster.rotate_host_key("gpu1")
    refused = cluster.ssh("gpu1", "root", "true")
    assert refused.returncode == 255
    assert "Host key verification failed" in refused.stderr

    async def connect() -> None:
        async with asyncssh.connect(**cluster["gpu1"].asyncssh_options("root")):
            pass

    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        asyncio.run(asyncio.wait_for(connect(), 10))
    cluster.trust_host_keys()
    assert cluster.ssh("gpu1", "root", "true").returncode == 0


def test_hundred_hosts_start_concurrently(make_cluster) -> None:
    started = time.monotonic()
    cluster = make_cluster(100)
    assert time.monotonic() - started < 20
    assert all(host.running for host in cluster)
    assert len({host.port for host in cluster}) == 100
    result = cluster.ssh("gpu100", "root", "nvidia-smi -L")
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 4
