"""The probe over real sshd and the local transport: GPUs, real processes and owners, faults."""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.probe import (
    PROBE_COMMAND,
    PROBE_LOOP_COMMAND,
    HostSample,
    parse_probe,
    split_sections,
)
from jupyter_gpuhive.hosts.vendors.nvidia_smi import NvsmiParseError
from jupyter_gpuhive.model import utcnow
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.sim.inventory import HOST_ENV, NA
from jupyter_gpuhive.sim.users import start_gpu_process
from tests.hosts.helpers import G1, G2, MIG, OLD, accepted_logins, local_decl
from tests.support.waiting import until


async def probe(pool, name: str) -> HostSample:
    result = await pool.run(name, PROBE_COMMAND)
    assert result.exit_status == 0, result.stderr
    return parse_probe(name, result.stdout, utcnow())


async def test_probe_reports_gpus_and_processes_of_two_real_users(
    hive_cluster, sim_users, gpu_processes, make_pool
) -> None:
    alice, bob = sim_users
    gpus = hive_cluster.host_config(G1).gpus
    a = hive_cluster.start_gpu_process(
        G1, [0], user=alice, command=("sleep", "301"), mem_mib=1234, util=50
    )
    b = hive_cluster.start_gpu_process(
        G1, [gpus[2].uuid], user=bob, command=("sleep", "302"), mem_mib=777, util=30
    )
    gpu_processes.extend([a, b])
    # root: only root (or the owner) may read a process's environment, as on a real host
    pool = make_pool(hive_cluster, names=[G1, G2], user="root")

    sample = await probe(pool, G1)

    assert sample.gpu_error is None
    assert [g.index for g in sample.gpus] == [0, 1, 2, 3]
    assert [g.uuid for g in sample.gpus] == [g.uuid for g in gpus]
    assert {g.name for g in sample.gpus} == {"NVIDIA A100-SXM4-40GB"}
    assert all(g.mem_total_mib == 40960 for g in sample.gpus)
    busy, idle, other = sample.gpus[0], sample.gpus[1], sample.gpus[2]
    assert busy.util_gpu == 50
    assert other.util_gpu == 30
    assert idle.util_gpu == 0
    assert busy.mem_used_mib is not None
    assert busy.mem_used_mib >= 1234
    assert other.mem_used_mib is not None
    assert other.mem_used_mib >= 777
    assert idle.mem_used_mib is not None
    assert idle.mem_used_mib < 100
    assert busy.temperature_c is not None
    assert busy.power_w is not None
    assert busy.power_w > idle.power_w
    assert all(g.fan_pct is None for g in sample.gpus)  # A100 fans print [N/A]

    by_pid = {p.pid: p for p in sample.processes}
    assert set(by_pid) == {a.pid, b.pid}
    assert by_pid[a.pid].user == alice
    assert by_pid[b.pid].user == bob
    assert by_pid[a.pid].command == "sleep 301"
    assert by_pid[b.pid].command == "sleep 302"
    assert by_pid[a.pid].gpu_uuid == gpus[0].uuid
    assert by_pid[b.pid].gpu_uuid == gpus[2].uuid
    assert (by_pid[a.pid].used_memory_mib, by_pid[b.pid].used_memory_mib) == (1234, 777)

    # Host CPU and memory, from /proc of the (shared) machine.
    assert sample.cpu_count is not None
    assert sample.cpu_count >= 1
    assert sample.cpu_jiffies is not None
    busy_j, total_j = sample.cpu_jiffies
    assert 0 <= busy_j <= total_j
    assert total_j > 0
    assert sample.mem_total_mib is not None
    assert sample.mem_available_mib is not None
    assert 0 < sample.mem_available_mib <= sample.mem_total_mib

    # Processes are per host: the other host sees none of them.
    other_host = await probe(pool, G2)
    assert other_host.processes == ()
    assert {g.uuid for g in other_host.gpus}.isdisjoint({g.uuid for g in gpus})


def probe_loops(host: str) -> list[int]:
    """PIDs of the probe loops running on one simulated host (found through /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"while read -r token" in cmdline and f"{HOST_ENV}={host}".encode() in environ:
            found.append(int(entry.name))
    return found


async def test_one_ssh_session_per_host_one_request_per_sweep(
    hive_cluster, make_pool, channels, sim_users, gpu_processes
) -> None:
    logins_before = {h: accepted_logins(hive_cluster, h) for h in hive_cluster.names}
    pool = make_pool(hive_cluster)
    sampler = Sampler(pool, interval=5)
    ports = {h.port: h.name for h in hive_cluster}

    first = await sampler.sweep()
    assert set(first.samples) == set(hive_cluster.names), first.failures
    assert first.samples[G2].processes == ()
    # A process started between two sweeps is in the second: each sweep really probed, over
    # the session the first one opened.
    gpu_processes.append(
        hive_cluster.start_gpu_process(G2, [1], user=sim_users[0], command=("sleep", "303"))
    )
    second = await sampler.sweep()
    assert set(second.samples) == set(hive_cluster.names), second.failures
    assert [p.command for p in second.samples[G2].processes] == ["sleep 303"]
    per_host = {ports[port]: n for port, n in channels.sessions.items()}
    assert per_host == dict.fromkeys(hive_cluster.names, 1)
    assert all(cmds == [PROBE_LOOP_COMMAND] for cmds in channels.commands.values())
    # ...over one persistent connection per host: sshd accepted exactly one more login each.
    assert {
        h: accepted_logins(hive_cluster, h) - logins_before[h] for h in hive_cluster.names
    } == dict.fromkeys(hive_cluster.names, 1)
    assert len(probe_loops(G1)) == 1


async def test_a_probe_loop_that_died_is_replaced_without_a_lost_sample(
    hive_cluster, make_pool, channels
) -> None:
    pool = make_pool(hive_cluster, names=[G1])
    sampler = Sampler(pool, interval=5)
    assert G1 in (await sampler.sweep()).samples
    [pid] = probe_loops(G1)
    os.kill(pid, signal.SIGKILL)
    assert await until(lambda: not probe_loops(G1), timeout=5)
    await asyncio.sleep(0.2)  # the channel's close reaches the client
    sweep = await sampler.sweep()
    assert G1 in sweep.samples, sweep.failures
    assert pool.status(G1).state == "up"
    assert sum(channels.sessions.values()) == 2  # the dead loop's session and its successor
    [new] = probe_loops(G1)
    assert new != pid
    # Closing the pool ends the loop (its scratch folder goes with it).
    await pool.close()
    assert await until(lambda: not probe_loops(G1), timeout=5)


async def test_mig_host_reports_mig_uuids(hive_cluster, make_pool) -> None:
    config = hive_cluster.host_config(MIG)
    pool = make_pool(hive_cluster, names=[MIG])
    sample = await probe(pool, MIG)
    assert sample.gpu_error is None
    assert [g.uuid for g in sample.gpus] == [g.uuid for g in config.gpus]
    assert sample.mig_uuids == {config.gpus[0].uuid: tuple(m.uuid for m in config.gpus[0].mig)}
    assert all(u.startswith("MIG-") for u in sample.mig_uuids[config.gpus[0].uuid])


async def test_unavailable_values_become_none(hive_cluster, make_pool) -> None:
    config = hive_cluster.host_config(OLD)
    assert config.gpus[0].unavailable  # the preset prints [Not Supported] for these
    pool = make_pool(hive_cluster, names=[OLD])
    sample = await probe(pool, OLD)
    assert sample.gpu_error is None
    old, v100 = sample.gpus
    assert (old.util_gpu, old.util_mem, old.power_w) == (None, None, None)
    assert old.fan_pct == 30
    assert old.mem_total_mib == 2048
    assert old.temperature_c is not None
    assert v100.util_gpu == 0
    assert v100.power_w is not None
    assert v100.fan_pct is None

    # An [N/A] chosen at run time (the stand-in reads its config on every call).
    changed = hive_cluster.host_config(OLD)
    changed.gpus[1].unavailable = {"temperature.gpu": NA, "memory.used": NA}
    hive_cluster.write_host_config(OLD, changed)
    try:
        sample = await probe(pool, OLD)
    finally:
        hive_cluster.write_host_config(OLD, config)
    assert sample.gpu_error is None
    assert (sample.gpus[1].temperature_c, sample.gpus[1].mem_used_mib) == (None, None)
    assert sample.gpus[1].mem_total_mib == 16160


async def test_driver_failure_marks_gpus_unknown_but_host_up(hive_cluster, make_pool) -> None:
    pool = make_pool(hive_cluster, names=[G2, G1])
    sampler = Sampler(pool, interval=5)
    hive_cluster.set_fault(G2, driver_failure=True)
    try:
        sweep = await sampler.sweep()
    finally:
        hive_cluster.clear_faults(G2)
    assert sweep.failures == {}
    failed = sweep.samples[G2]
    assert failed.gpu_error is not None
    assert "couldn't communicate with the NVIDIA driver" in failed.gpu_error
    assert failed.gpus == ()
    assert failed.processes == ()
    assert failed.cpu_jiffies is not None
    assert failed.mem_total_mib is not None
    assert pool.status(G2).state == "up"
    assert pool.status(G2).error is None
    assert sweep.samples[G1].gpu_error is None
    assert len(sweep.samples[G1].gpus) == 4
    # Once the driver is back, so are the GPUs.
    again = await sampler.sweep()
    assert again.samples[G2].gpu_error is None
    assert len(again.samples[G2].gpus) == 4


async def test_junk_output_is_a_gpu_error_never_an_exception(hive_cluster, make_pool) -> None:
    pool = make_pool(hive_cluster, names=[G2, G1])
    sampler = Sampler(pool, interval=5)
    hive_cluster.set_fault(G2, junk=True)
    try:
        sweep = await sampler.sweep()
    finally:
        hive_cluster.clear_faults(G2)
    junk = sweep.samples[G2]
    assert junk.gpu_error
    assert junk.gpus == ()
    assert pool.status(G2).state == "up"
    assert sampler.live[G2].sample is junk
    assert len(sweep.samples[G1].gpus) == 4


JUNK = [
    "index, uuid, name\n0, GPU-1, x\n1, , y\n",  # a row without a UUID
    "index, uuid, name, utilization.gpu [%]\n0, GPU-1, x, lots\n",  # not a number
    "some words and no header\n",
    "\x00\x01\x02 binary \xff\n",
    "@@gpuhive:gpus 0\n@@gpuhive:stat 0\ncpu x y\n",  # fake section markers
    "index, uuid\n" + "0, GPU-0\n" * 5000,  # far too long, repeated index
]


@pytest.mark.parametrize("junk", JUNK, ids=range(len(JUNK)))
async def test_junk_variants_over_the_local_transport(make_local_host, make_pool, junk) -> None:
    host = make_local_host()
    host.set_fault(junk=junk)
    sampler = Sampler(make_pool([local_decl(host)]), interval=5)
    sweep = await sampler.sweep()
    assert sweep.failures == {}
    sample = sweep.samples[host.name]
    assert sample.cpu_jiffies is not None
    assert sample.mem_total_mib is not None
    # Either the GPUs are unknown with a reason, or what was parsed is self-consistent.
    if sample.gpu_error is None:
        assert all(g.uuid for g in sample.gpus)
    else:
        assert sample.gpus == ()
        assert sample.processes == ()


def test_parse_probe_without_gpu_section_raises_parse_error() -> None:
    with pytest.raises(NvsmiParseError):
        parse_probe("h", "sh: 1: nvidia-smi: not found\n", utcnow())
    assert split_sections("noise\n@@gpuhive:gpus 3\na\nb\n@@gpuhive:ps 0\n") == {
        "gpus": (3, "a\nb"),
        "ps": (0, ""),
    }


async def test_missing_nvidia_smi_is_a_gpu_error(make_local_host, make_pool) -> None:
    host = make_local_host()
    (host.bin_dir / "nvidia-smi").unlink()
    decl = local_decl(host)
    decl.extra["env"]["PATH"] = f"{host.bin_dir}:/usr/bin:/bin"
    sampler = Sampler(make_pool([decl]), interval=5)
    sample = (await sampler.sweep()).samples[host.name]
    assert sample.gpu_error is not None
    assert "127" in sample.gpu_error
    assert sample.gpus == ()


async def test_probe_over_local_transport(
    make_local_host, make_pool, sim_users, gpu_processes
) -> None:
    alice, _ = sim_users
    host = make_local_host()
    config = host.config
    proc = start_gpu_process(host.name, [3], user=alice, command=("sleep", "303"), mem_mib=99)
    gpu_processes.append(proc)
    pool = make_pool([local_decl(host)])
    sample = await probe(pool, host.name)
    assert sample.gpu_error is None
    assert [g.uuid for g in sample.gpus] == [g.uuid for g in config.gpus]
    assert sample.gpus[3].util_gpu is not None
    (found,) = sample.processes
    assert (found.pid, found.user, found.command) == (proc.pid, alice, "sleep 303")
    assert (found.gpu_uuid, found.used_memory_mib) == (config.gpus[3].uuid, 99)
    assert sample.cpu_jiffies is not None
    assert sample.mem_total_mib is not None
    assert pool.status(host.name).state == "up"


async def test_owners_are_looked_up_once_per_process(make_cluster, make_pool, sim_users) -> None:
    """`ps` runs for GPU processes the probe loop has not seen, not on every sweep."""
    cluster = make_cluster(1)
    calls = cluster.bin_dir / "ps-calls"
    calls.touch(mode=0o666)
    calls.chmod(0o666)
    wrapper = cluster.bin_dir / "ps"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>{calls}\nexec /usr/bin/ps "$@"\n')
    wrapper.chmod(0o755)
    alice, bob = sim_users
    started = []
    try:
        pool = make_pool(cluster, user="root")  # the stand-in reads every user's environment
        sampler = Sampler(pool, interval=5)

        async def owners() -> list[tuple[str | None, str]]:
            sweep = await sampler.sweep()
            assert "gpu1" in sweep.samples, sweep.failures
            return sorted((p.user, p.command) for p in sweep.samples["gpu1"].processes)

        assert await owners() == []
        # Arguments with a glob and a backslash come back as they are (no expansion, no escapes).
        odd = ("/usr/bin/python3", "-c", "import time; time.sleep(311)  # * \\t")
        started.append(cluster.start_gpu_process("gpu1", [0], user=alice, command=odd))
        assert await owners() == [(alice, " ".join(odd))]
        assert await owners() == [(alice, " ".join(odd))]
        assert len(calls.read_text().splitlines()) == 1  # the second sweep used what it knew
        started.append(cluster.start_gpu_process("gpu1", [1], user=bob, command=("sleep", "312")))
        assert await owners() == [(alice, " ".join(odd)), (bob, "sleep 312")]
        asked = calls.read_text().splitlines()
        assert len(asked) == 2
        assert asked[1].endswith(f"-p {started[1].pid}")  # only the new one
        started[0].kill()
        started[0].wait()
        assert await owners() == [(bob, "sleep 312")]
        assert len(calls.read_text().splitlines()) == 2
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the probe as another user")
async def test_local_probe_loop_runs_as_the_hosts_account(
    make_local_host, make_pool, sim_users
) -> None:
    host = make_local_host()
    pool = make_pool([local_decl(host, user=sim_users[0])])
    sweep = await Sampler(pool, interval=5).sweep()
    assert host.name in sweep.samples, sweep.failures
    assert len(sweep.samples[host.name].gpus) == 4
    uids = {os.stat(f"/proc/{pid}").st_uid for pid in probe_loops(host.name)}
    assert pwd.getpwnam(sim_users[0]).pw_uid in uids
    await pool.close()
    assert await until(lambda: not probe_loops(host.name), timeout=5)


def test_hostile_nvidia_smi_output_never_runs_as_code(tmp_path: Path) -> None:
    """Whatever nvidia-smi prints is data: shell syntax in a PID or a process name is not
    evaluated, and the probe still answers."""
    planted = tmp_path / "planted"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *query-gpu*) printf '%s\\n' 'index, uuid, name, utilization.gpu [%]' "
        "'0, GPU-0, Fake, 5' ;;\n"
        f"  *) printf '%s\\n' 'pid, process_name, gpu_uuid, used_memory [MiB]' "
        f"'1$(touch {planted}), x, GPU-0, 1' '1`touch {planted}`, y, GPU-0, 1' "
        # a path that /proc resolves, and would be bad syntax for eval (the shell would die)
        "'1/../1, z, GPU-0, 1' "
        f"'{os.getpid()}, $(touch {planted}) *, GPU-0, 7' ;;\n"
        "esac\n"
    )
    (fake / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", "-c", PROBE_COMMAND], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert not planted.exists()
    sections = split_sections(done.stdout)
    assert "$(touch" in sections["apps"][1]  # passed on verbatim, as data
    owners = [line.split() for line in sections["ps"][1].splitlines()]
    assert [o[0] for o in owners] == [str(os.getpid())]  # the one real PID got its ps line
    assert sections["ncpu"][1].strip().isdigit()
