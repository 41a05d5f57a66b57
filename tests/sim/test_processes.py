"""Real processes of real users show up on simulated GPUs, and leave when killed."""

from __future__ import annotations

import os
import subprocess

import pytest

from jupyter_gpuhive.hosts.vendors import nvidia_smi as nvsmi
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.processes import Placement, parse_visible_devices
from jupyter_gpuhive.sim.users import start_gpu_process
from tests.support.waiting import wait_for

APPS = ("--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv")


def owner(pid: int) -> str:
    return subprocess.run(
        ["ps", "-o", "user=", "-p", str(pid)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_visible_devices_are_read_like_cuda() -> None:
    gpus = preset("mig", "h").gpus
    mig_uuid = gpus[0].mig[2].uuid
    assert parse_visible_devices("1", gpus) == (Placement(1),)
    assert parse_visible_devices("0", gpus) == (Placement(0, 0),)  # first slice of a MIG GPU
    assert parse_visible_devices(f"{gpus[1].uuid[:12]},{mig_uuid}", gpus) == (
        Placement(1),
        Placement(0, 2),
    )
    assert parse_visible_devices("1,7,0", gpus) == (Placement(1),)  # stops at a missing device
    assert parse_visible_devices("", gpus) == ()
    assert parse_visible_devices("-1", gpus) == ()
    assert parse_visible_devices("GPU-", gpus) == ()  # an ambiguous prefix names nothing


def test_processes_of_two_users(sim_users, make_local_host, run_smi, gpu_processes) -> None:
    alice, bob = sim_users
    host = make_local_host()
    uuids = [g.uuid for g in host.config.gpus]
    a = start_gpu_process(host.name, [0, 1], user=alice, mem_mib=1500, util=40)
    b = start_gpu_process(host.name, [uuids[3]], user=bob, mem_mib=700, util=90)
    elsewhere = start_gpu_process("another-host", [0], user=bob, mem_mib=1)
    gpu_processes.extend([a, b, elsewhere])

    procs = nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout)
    assert [(p.pid, p.gpu_uuid, p.used_memory_mib) for p in procs] == [
        (a.pid, uuids[0], 1500),
        (a.pid, uuids[1], 1500),
        (b.pid, uuids[3], 700),
    ]
    assert procs[0].process_name == "sleep"
    assert (owner(a.pid), owner(b.pid)) == (alice, bob)

    gpus = nvsmi.parse_query_gpu(
        run_smi(host, "--query-gpu=index,uuid,utilization.gpu,memory.used", "--format=csv").stdout
    )
    assert [(g.util_gpu, g.mem_used_mib) for g in gpus] == [
        (40, 1504),
        (40, 1504),
        (0, 4),
        (90, 704),
    ]

    b.kill()
    b.wait()
    procs = nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout)
    assert {p.pid for p in procs} == {a.pid}
    subprocess.run(["kill", str(a.pid)], check=True)
    a.wait()
    assert nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout) == []


def test_shell_wrappers_do_not_count(make_local_host, run_smi, gpu_processes) -> None:
    host = make_local_host()
    shell = start_gpu_process(host.name, [2], command=["bash", "-c", "sleep 60; true"])
    gpu_processes.append(shell)
    procs = []
    for _ in range(50):  # until bash has started its child
        procs = nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout)
        if procs:
            break
    assert len(procs) == 1
    assert procs[0].pid != shell.pid
    assert procs[0].process_name == "sleep"


def test_load_defaults_to_rss_and_cpu(make_local_host, run_smi, gpu_processes) -> None:
    host = make_local_host()
    busy = start_gpu_process(host.name, [1], command=["/bin/sh", "-c", "while :; do :; done"])
    gpu_processes.append(busy)
    # sh is a wrapper: nothing shows; a python busy loop is a "GPU program".
    busy2 = start_gpu_process(host.name, [1], command=["python3", "-c", "while True: pass"])
    gpu_processes.append(busy2)
    procs = nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout)
    assert [p.pid for p in procs] == [busy2.pid]
    assert procs[0].used_memory_mib is not None
    assert procs[0].used_memory_mib >= 256

    # Utilization derives from CPU time over the process's age: let it run a little
    # (kernel CPU-time ticks are 10 ms) before asking.
    def loaded() -> bool:
        gpu = nvsmi.parse_query_gpu(
            run_smi(host, "--query-gpu=index,uuid,utilization.gpu", "--format=csv").stdout
        )[1]
        assert gpu.util_gpu is not None
        return gpu.util_gpu > 20

    wait_for(loaded, 5, "GPU 1's utilization above 20 %")


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as other users needs root")
def test_unprivileged_caller_skips_unreadable_processes(
    sim_users, make_local_host, run_smi, gpu_processes
) -> None:
    alice, bob = sim_users
    host = make_local_host()
    a = start_gpu_process(host.name, [0], user=alice, mem_mib=10)
    b = start_gpu_process(host.name, [1], user=bob, mem_mib=20)
    gpu_processes.extend([a, b])
    seen_by_bob = nvsmi.parse_compute_apps(run_smi(host, *APPS, user=bob).stdout)
    assert [p.pid for p in seen_by_bob] == [b.pid]
    seen_by_root = nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout)
    assert [p.pid for p in seen_by_root] == [a.pid, b.pid]
