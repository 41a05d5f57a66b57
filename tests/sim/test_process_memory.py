"""The stand-in reports each process's memory as a driver does: one row per process and GPU,
in `--query-compute-apps=pid,used_memory`, and a process whose memory grows in place (same
pid) is reported with its new figure at the next call, which over-share detection and the
share benchmark rely on."""

from __future__ import annotations

import signal
import subprocess
import time

from jupyter_gpuhive.sim.cluster import start_gpu_process
from jupyter_gpuhive.sim.core import MEM_ENV

QUERY = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,nounits"]
# Waits for SIGUSR1, then becomes `sleep` with more memory: the same pid, grown.
GROWS = (
    "import os, signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
    "open(sys.argv[3], 'w').close()\n"
    "signal.sigwait({signal.SIGUSR1})\n"
    "os.execve('/bin/sleep', ['sleep', '600'], {**os.environ, sys.argv[1]: sys.argv[2]})\n"
)


def rows(env: dict[str, str]) -> list[tuple[int, str, int]]:
    out = subprocess.run(QUERY, capture_output=True, text=True, env=env, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "pid, gpu_uuid, used_gpu_memory [MiB]"  # the driver's header
    found = []
    for line in lines[1:]:
        pid, uuid, mib = (part.strip() for part in line.split(","))
        found.append((int(pid), uuid, int(mib)))
    return found


def test_memory_per_process_and_gpu_and_growth_in_place(
    make_local_host, gpu_processes, tmp_path
) -> None:
    host = make_local_host()
    env = host.env()
    gpus = host.config.gpus
    ready = tmp_path / "ready"
    two = start_gpu_process(host.name, [0, 1], mem_mib=700, config=host.config_path)
    grows = start_gpu_process(host.name, [2], mem_mib=100, config=host.config_path,
                              command=("python3", "-c", GROWS, MEM_ENV, "9000", str(ready)))  # fmt: skip
    gpu_processes.extend([two, grows])
    found = rows(env)
    # A process on two GPUs is two rows, each with what it uses on that GPU.
    assert (two.pid, gpus[0].uuid, 700) in found and (two.pid, gpus[1].uuid, 700) in found
    assert (grows.pid, gpus[2].uuid, 100) in found
    deadline = time.monotonic() + 10
    while not ready.exists():  # it waits for the signal now (before, the signal ends it)
        assert time.monotonic() < deadline
        time.sleep(0.02)
    grows.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while (grows.pid, gpus[2].uuid, 9000) not in rows(env):
        assert time.monotonic() < deadline, rows(env)
        time.sleep(0.05)
    assert grows.poll() is None  # the same process, grown
