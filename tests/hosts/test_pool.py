"""HostPool on real sshd hosts (faults, trust, limits, reuse, users) and the local transport."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import shutil
import stat
import time
from pathlib import Path

import asyncssh
import pytest

from jupyter_gpuhive.hosts.pool import HostUnavailable, SshSettings
from jupyter_gpuhive.hosts.probe import END, PROBE_LOOP_COMMAND
from jupyter_gpuhive.hosts.ssh import ensure_client_key, fetch_host_key, known_hosts_line
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.sim.ports import free_port
from tests.hosts.helpers import (
    G1,
    G2,
    accepted_logins,
    host_decls,
    kill_sim_processes,
    local_decl,
    sim_processes,
)
from tests.support.waiting import until


async def timed_sweep(sampler: Sampler):
    started = time.monotonic()
    sweep = await sampler.sweep()
    return sweep, time.monotonic() - started


def read_text(path: str) -> str:
    return Path(path).read_text()


# --- hosts that fail ---------------------------------------------------------------------


async def test_stopped_host_is_down_others_fine_then_back_by_itself(make_cluster, make_pool):
    cluster = make_cluster(3)
    pool = make_pool(cluster)
    sampler = Sampler(pool, interval=5, timeout=10)
    await sampler.sweep()  # connections open
    healthy = min([(await timed_sweep(sampler))[1] for _ in range(2)])

    cluster.stop_host("gpu2")
    sweep, elapsed = await timed_sweep(sampler)
    assert set(sweep.samples) == {"gpu1", "gpu3"}
    reason = sweep.failures["gpu2"]
    port = cluster["gpu2"].port
    assert f"127.0.0.1:{port}" in reason
    assert re.search(r"connection to .* was lost|connection refused by", reason), reason
    status = pool.status("gpu2")
    assert (status.state, status.error) == ("down", reason)
    assert status.to_json()["state"] == "down"
    assert pool.status("gpu1").state == pool.status("gpu3").state == "up"
    assert elapsed < healthy * 1.5 + 0.5, (elapsed, healthy)  # the dead host costs nothing

    # While it stays down (backing off or refused) the sweeps keep their pace.
    for _ in range(3):
        sweep, elapsed = await timed_sweep(sampler)
        assert "gpu2" in sweep.failures
        assert set(sweep.samples) == {"gpu1", "gpu3"}
        assert elapsed < healthy * 1.5 + 0.5, (elapsed, healthy)

    # Once its backoff has passed it is tried (and refused) again.
    async def tried_again() -> bool:
        await sampler.sweep()
        return pool.status("gpu2").failures >= 2

    await until(tried_again, timeout=15, interval=0.2)
    assert "refused" in pool.status("gpu2").error

    cluster.start_host("gpu2")

    async def back():
        return "gpu2" in (await sampler.sweep()).samples

    assert await until(back, timeout=10)
    status = pool.status("gpu2")
    assert (status.state, status.error, status.failures) == ("up", None, 0)
    assert status.last_ok is not None
    assert sampler.live["gpu2"].sample is not None
    assert len(sampler.live["gpu2"].sample.gpus) == 4


async def test_host_that_disappears_mid_sweep(make_cluster, make_pool) -> None:
    cluster = make_cluster(2)
    pool = make_pool(cluster)
    sampler = Sampler(pool, interval=5, timeout=10)
    await sampler.sweep()
    cluster.set_fault("gpu2", delay_s=3)
    sweeping = asyncio.ensure_future(timed_sweep(sampler))
    await asyncio.sleep(0.5)  # the probe of gpu2 is running now
    cluster.stop_host("gpu2")
    sweep, elapsed = await sweeping
    assert elapsed < 3, elapsed  # ended by the lost connection, not by the stand-in's delay
    assert "gpu1" in sweep.samples
    port = cluster["gpu2"].port
    assert sweep.failures == {
        "gpu2": f"the connection to 127.0.0.1:{port} was lost while the command ran"
    }
    assert pool.status("gpu2").state == "down"


async def test_hanging_host_times_out_and_others_are_recorded(make_cluster, make_pool) -> None:
    cluster = make_cluster(3)
    # connect_timeout stays long: a hanging command on an open connection is bounded by the
    # command timeout alone, or a sweep would outlast its interval.
    pool = make_pool(cluster, connect_timeout=5.0)
    sampler = Sampler(pool, interval=4, timeout=3)
    await sampler.sweep()
    cluster.set_fault("gpu2", hang=True)
    config = cluster["gpu2"].config_path
    try:
        started = time.time()
        sweep, elapsed = await timed_sweep(sampler)
        assert 3 <= elapsed < 4.5, elapsed  # the command timeout, not connect + command
        port = cluster["gpu2"].port
        assert sweep.failures == {"gpu2": f"no answer from 127.0.0.1:{port} within 3 s"}
        assert pool.status("gpu2").state == "down"
        assert pool.status("gpu2").error == sweep.failures["gpu2"]
        for name in ("gpu1", "gpu3"):
            live = sampler.live[name]
            assert live.sample is sweep.samples[name]
            assert len(live.sample.gpus) == 4
            # Recorded as soon as it answered, not when the slow host gave up.
            assert live.updated_at.timestamp() < started + elapsed - 0.5
            key = f"gpu:{live.sample.gpus[0].uuid}"
            assert len(sampler.metrics.since(key)) == 2

        cluster.clear_faults("gpu2")
        # The hung stand-in notices the cleared knob and ends (none is left behind).
        assert await until(lambda: not sim_processes(config), timeout=5)

        async def back():
            return "gpu2" in (await sampler.sweep()).samples

        assert await until(back, timeout=10)
        assert pool.status("gpu2").state == "up"
    finally:
        cluster.clear_faults("gpu2")
        kill_sim_processes(config)  # whatever happened, no hung probe outlives the test


async def test_unknown_host_key_is_refused_then_trusted(make_cluster, make_pool, tmp_path):
    cluster = make_cluster(1)
    known_hosts = tmp_path / "known_hosts"
    shutil.copyfile(cluster.known_hosts, known_hosts)
    pool = make_pool(cluster, known_hosts=[str(known_hosts)])
    assert (await pool.run("gpu1", "echo ok")).stdout == "ok\n"
    cluster.rotate_host_key("gpu1")  # known_hosts still holds the old key
    logins = accepted_logins(cluster, "gpu1")

    with pytest.raises(HostUnavailable) as refused:
        await pool.run("gpu1", "echo ok")
    reason = refused.value.reason
    assert "not trusted" in reason
    assert "`jupyter gpuhive trust gpu1`" in reason
    assert f"127.0.0.1:{cluster['gpu1'].port}" in reason
    assert pool.status("gpu1").state == "down"
    assert accepted_logins(cluster, "gpu1") == logins  # we never logged in to the new key

    decl = pool.hosts["gpu1"]
    key = await fetch_host_key(decl)
    offered = read_text(f"{cluster['gpu1'].host_key}.pub").split()[:2]
    assert key.export_public_key("openssh").decode().split()[:2] == offered
    line = known_hosts_line(decl, key)
    assert line == f"[127.0.0.1]:{decl.port} {' '.join(offered)}"
    assert known_hosts_line(HostDecl("x", "10.1.2.3", 22), key).startswith("10.1.2.3 ssh-ed25519 ")
    with known_hosts.open("a") as out:
        out.write(line + "\n")

    async def trusted():
        with contextlib.suppress(HostUnavailable):
            return (await pool.run("gpu1", "echo ok")).stdout == "ok\n"
        return False

    assert await until(trusted, timeout=5)
    assert pool.status("gpu1").state == "up"


async def test_fetch_host_key_of_a_stopped_host_fails(make_cluster) -> None:
    cluster = make_cluster(1)
    decl = host_decls(cluster)[0]
    cluster.stop_host("gpu1")
    with pytest.raises((OSError, asyncssh.Error, TimeoutError)):
        await fetch_host_key(decl, timeout=3)


async def test_key_not_authorized(hive_cluster, make_pool, monitor_user, tmp_path) -> None:
    path = tmp_path / "keys" / "gpuhive_ed25519"
    key = ensure_client_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_text(f"{path}.pub").startswith("ssh-ed25519 ")
    again = ensure_client_key(path)  # loaded, not replaced
    assert again.export_public_key() == key.export_public_key()

    pool = make_pool(hive_cluster, names=[G1], client_keys=[str(path)])
    with pytest.raises(HostUnavailable) as refused:
        await pool.run(G1, "true")
    reason = refused.value.reason
    assert f"refused the key for user {monitor_user}" in reason
    assert "authorized_keys" in reason
    assert "`jupyter gpuhive key`" in reason
    assert pool.status(G1).state == "down"


async def test_connection_refused(make_pool) -> None:
    port = free_port()
    pool = make_pool([HostDecl("ghost", "127.0.0.1", port, "root")], SshSettings())
    started = time.monotonic()
    with pytest.raises(HostUnavailable) as refused:
        await pool.run("ghost", "true")
    assert time.monotonic() - started < 2
    assert refused.value.reason == f"connection refused by 127.0.0.1:{port} (is sshd running?)"
    assert str(refused.value).startswith("ghost: ")
    # Backing off: the next call fails at once with the same reason, without trying.
    with pytest.raises(HostUnavailable) as again:
        await pool.run("ghost", "true")
    assert again.value.reason == refused.value.reason
    assert pool.status("ghost").failures == 1


async def test_unknown_host_name(make_pool) -> None:
    pool = make_pool([], SshSettings())
    with pytest.raises(HostUnavailable, match="no such host"):
        await pool.run("nowhere", "true")


async def test_run_all_returns_failures_instead_of_raising(make_cluster, make_pool) -> None:
    cluster = make_cluster(2)
    cluster.stop_host("gpu1")
    results = await make_pool(cluster).run_all("printenv GPUHIVE_SIM_HOST")
    assert isinstance(results["gpu1"], HostUnavailable)
    assert results["gpu2"].stdout == "gpu2\n"


# --- limits, reuse, users -------------------------------------------------------------------


async def test_max_sessions_is_honoured(hive_cluster, sim_users, make_pool, channels) -> None:
    alice, _ = sim_users  # a plain account: no slow shell start-up
    port = hive_cluster[G1].port
    pool = make_pool(hive_cluster, names=[G1], user=alice, max_sessions=8)
    results = await asyncio.gather(
        *(pool.run(G1, f"sleep 0.3; echo {i}") for i in range(20)), return_exceptions=True
    )
    assert [getattr(r, "stdout", r) for r in results] == [f"{i}\n" for i in range(20)]
    assert channels.sessions[port] >= 20  # more when sshd refused one for a moment
    assert channels.peak[port] <= 8
    assert pool.status(G1).state == "up"


async def test_sessions_refused_by_sshd_are_retried(
    hive_cluster, sim_users, make_pool, channels
) -> None:
    """Above sshd's MaxSessions (10) sessions are refused; the pool waits and asks again."""
    _, bob = sim_users
    host = hive_cluster[G1]
    pool = make_pool(hive_cluster, names=[G1], user=bob, max_sessions=20)
    await pool.run(G1, "true")
    conn = pool.backend(G1).connections[(G1, bob)]
    refusals = read_text(host.log_path).count("no more sessions")
    results = await asyncio.gather(
        *(pool.run(G1, f"sleep 0.4; echo {i}", timeout=10) for i in range(16)),
        return_exceptions=True,
    )
    assert [getattr(r, "stdout", r) for r in results] == [f"{i}\n" for i in range(16)]
    assert read_text(host.log_path).count("no more sessions") > refusals  # sshd did refuse
    assert channels.peak[host.port] <= 10
    assert pool.backend(G1).connections[(G1, bob)] is conn  # and the connection was kept
    assert pool.status(G1).state == "up"


async def test_connection_is_reused(hive_cluster, make_pool, monitor_user, channels) -> None:
    before = accepted_logins(hive_cluster, G2)
    pool = make_pool(hive_cluster, names=[G2])
    await pool.run(G2, "true")
    first = pool.backend(G2).connections[(G2, monitor_user)]
    for _ in range(3):
        assert (await pool.run(G2, "printenv GPUHIVE_SIM_HOST")).stdout == f"{G2}\n"
        assert pool.backend(G2).connections[(G2, monitor_user)] is first
    assert channels.sessions[hive_cluster[G2].port] == 4
    assert accepted_logins(hive_cluster, G2) - before == 1


async def test_run_as_other_users(hive_cluster, sim_users, make_pool) -> None:
    alice, bob = sim_users
    pool = make_pool(hive_cluster, names=[G1], user="root")
    assert (await pool.run(G1, "id -un")).stdout.strip() == "root"
    assert (await pool.run(G1, "id -un", user=alice)).stdout.strip() == alice
    assert (await pool.run(G1, "id -un", user=bob)).stdout.strip() == bob
    result = await pool.run(G1, "cat; exit 3", user=alice, stdin="from stdin\n")
    assert (result.exit_status, result.stdout) == (3, "from stdin\n")
    # A user who cannot log in fails that call, not the host.
    with pytest.raises(HostUnavailable, match="refused the key for user nosuchu"):
        await pool.run(G1, "true", user="nosuchu")
    assert pool.status(G1).state == "up"


# --- local transport ---------------------------------------------------------------------------


async def test_local_command_timeout_kills_the_process_group(make_local_host, make_pool, tmp_path):
    host = make_local_host()
    pool = make_pool([local_decl(host)])
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(HostUnavailable) as timed_out:
        await pool.run(host.name, f"sleep 60 & echo $! > {pid_file}; sleep 60", timeout=1)
    assert time.monotonic() - started < 3
    assert timed_out.value.reason == "no answer from the local command within 1 s"
    child = int(pid_file.read_text())
    await until(lambda: _gone(child), timeout=3, what=f"background child {child} to end")
    assert pool.status(host.name).state == "down"


async def test_cancelled_local_command_does_not_outlive_its_caller(
    make_local_host, make_pool, tmp_path
) -> None:
    host = make_local_host()
    pool = make_pool([local_decl(host)])
    pid_file = tmp_path / "child.pid"
    running = asyncio.ensure_future(
        pool.run(host.name, f"sleep 60 & echo $! > {pid_file}; sleep 60", timeout=30)
    )
    assert await until(pid_file.exists, timeout=5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    child = int(read_text(str(pid_file)))
    await until(lambda: _gone(child), timeout=3, what=f"background child {child} to end")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


async def test_local_run_as_another_user(make_local_host, make_pool, sim_users) -> None:
    alice, _ = sim_users
    host = make_local_host()
    pool = make_pool([local_decl(host)])
    assert (await pool.run(host.name, "id -un", user=alice)).stdout.strip() == alice
    assert (await pool.run(host.name, "id -un")).stdout.strip() == "root"
    listing = await pool.run(host.name, "nvidia-smi -L", user=alice)
    assert listing.exit_status == 0
    assert len(listing.stdout.splitlines()) == 4
    echo = await pool.run(host.name, "cat", stdin="hello")
    assert echo.stdout == "hello"
    failed = await pool.run(host.name, "exit 7")
    assert failed.exit_status == 7


async def test_local_command_killed_by_signal_reports_minus_one(make_local_host, make_pool):
    host = make_local_host()
    pool = make_pool([local_decl(host)])
    result = await pool.run(host.name, "kill -KILL $$")
    assert result.exit_status == -1


def _scratch_local_decl(host, scratch: Path) -> HostDecl:
    """`local_decl(host)` whose commands make their temporary folders in `scratch`."""
    decl = local_decl(host)
    return dataclasses.replace(decl, extra={"env": {**decl.extra["env"], "TMPDIR": str(scratch)}})


async def test_closed_probe_loops_leave_no_scratch_folder(make_local_host, make_pool, tmp_path):
    """A probe loop makes a scratch folder for its FIFOs and removes it on exit; the local
    transport used to SIGKILL the loop at close, so its trap never ran and every loop ever
    closed left a folder in /tmp (one CI run left about 8,500)."""
    host = make_local_host()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    pool = make_pool([_scratch_local_decl(host, scratch)])
    answer = await pool.ask(host.name, PROBE_LOOP_COMMAND, end=END, timeout=10)
    assert "GPU-" in answer  # a real probe ran in the loop
    assert len(list(scratch.iterdir())) == 1  # the loop's scratch folder, while it lives
    await pool.close()
    assert list(scratch.iterdir()) == []


async def test_a_loop_closed_in_the_middle_of_a_probe_cleans_up(
    make_local_host, make_pool, tmp_path
):
    """A loop busy in a hung nvidia-smi does not read its end of input: it gets SIGTERM, the
    stand-in ends with its group and the loop's trap still removes the folder."""
    host = make_local_host()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    pool = make_pool([_scratch_local_decl(host, scratch)])
    await pool.ask(host.name, PROBE_LOOP_COMMAND, end=END, timeout=10)
    host.set_fault(hang=True)
    kept = set(sim_processes(host.config_path))  # the kept loop itself
    try:
        asking = asyncio.ensure_future(pool.ask(host.name, PROBE_LOOP_COMMAND, end=END, timeout=30))
        assert await until(lambda: set(sim_processes(host.config_path)) - kept, timeout=5)
        await pool.close()
        with pytest.raises(HostUnavailable, match="closed its host connections"):
            async with asyncio.timeout(5):  # at once, not after the ask's 30 s
                await asking
        with pytest.raises(HostUnavailable, match="closed"):  # nothing starts anew after close
            await pool.ask(host.name, PROBE_LOOP_COMMAND, end=END, timeout=10)
        assert list(scratch.iterdir()) == []
        assert await until(lambda: not sim_processes(host.config_path), timeout=5)
    finally:
        host.clear_faults()
        kill_sim_processes(host.config_path)
