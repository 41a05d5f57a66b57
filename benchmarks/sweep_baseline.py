"""Baseline of the sweep benchmark: TensorHive's polling pattern with parallel-ssh.

Run by sweep.py in its own process (parallel-ssh runs on gevent; kept away from asyncio):
``python benchmarks/sweep_baseline.py CONFIG.json`` prints one JSON line with the timings.

One poll, as TensorHive's monitors do it, every step a separate round trip and the hosts in
parallel (one ``run_command`` over all hosts per step, joined before the next):
1. ``nvidia-smi --query-gpu=…`` (GPU metrics);
2. per GPU, the processes on it (TensorHive uses ``nvidia-smi pmon``; the stand-in has no
   ``pmon``, so ``--query-compute-apps … -i INDEX``, one call per GPU);
3. per GPU process, ``ps`` for its owner;
4. CPU and memory with ``top -bn2 -d1`` (the 1 s sample TensorHive takes).

With ``--stand-in replay`` (sweep.py's default) the ``nvidia-smi`` these commands reach is the
same replay script our probe reaches (see ``sweep_sshd.install_replay``), with an answer
recorded for each argument set below (``baseline_nvidia_smi_args``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in main(): sweep_sshd reads the constants without parallel-ssh
    from pssh.clients import ParallelSSHClient

QUERY_GPU = (
    "nvidia-smi --query-gpu=index,uuid,name,utilization.gpu,utilization.memory,memory.used,"
    "memory.total,temperature.gpu,power.draw --format=csv,noheader,nounits"
)
QUERY_APPS = (
    "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits"
)
CPU = "top -bn2 -d1 | grep -E '^(%Cpu|MiB Mem)' | tail -n 2"


def baseline_nvidia_smi_args(gpus: int) -> list[list[str]]:
    """Every nvidia-smi argument list a poll runs (for the replay stand-in)."""
    apps = QUERY_APPS.split()[1:]
    return [QUERY_GPU.split()[1:], *([*apps, "-i", str(i)] for i in range(gpus))]


def machine_cpu_s() -> float:
    """CPU seconds this machine has been busy since boot (all cores, from /proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def step(client: ParallelSSHClient, commands: list[str]) -> list[list[str]]:
    """Run commands[i] on host i (all hosts at once), wait for all, return stdout lines."""
    output = client.run_command("%s", host_args=commands, stop_on_errors=False)
    client.join(output)
    lines = []
    for host_out in output:
        if host_out.exception is not None:
            raise RuntimeError(f"{host_out.host}: {host_out.exception!r}")
        lines.append(list(host_out.stdout or []))
    return lines


def poll(client: ParallelSSHClient, n: int) -> list[dict[str, Any]]:
    """One TensorHive-style poll of every host; returns what it learned per host."""
    hosts: list[dict[str, Any]] = [{"gpus": {}, "processes": []} for _ in range(n)]
    for info, lines in zip(hosts, step(client, [QUERY_GPU] * n), strict=True):
        for line in lines:
            cells = [c.strip() for c in line.split(",")]
            if len(cells) >= 9 and cells[0].isdigit():
                info["gpus"][int(cells[0])] = {"uuid": cells[1], "util": cells[3], "mem": cells[5]}
    max_gpus = max(len(h["gpus"]) for h in hosts)
    for index in range(max_gpus):
        cmds = [f"{QUERY_APPS} -i {index}" if index in h["gpus"] else ":" for h in hosts]
        for info, lines in zip(hosts, step(client, cmds), strict=True):
            for line in lines:
                cells = [c.strip() for c in line.split(",")]
                if cells and cells[0].isdigit():
                    info["processes"].append({"pid": int(cells[0]), "gpu": index})
    max_procs = max(len(h["processes"]) for h in hosts)
    for k in range(max_procs):
        cmds = [
            f"ps -o user= -p {h['processes'][k]['pid']}" if k < len(h["processes"]) else ":"
            for h in hosts
        ]
        for info, lines in zip(hosts, step(client, cmds), strict=True):
            if k < len(info["processes"]):
                info["processes"][k]["user"] = lines[0].strip() if lines else None
    for info, lines in zip(hosts, step(client, [CPU] * n), strict=True):
        info["cpu"] = lines
    return hosts


def main(path: str) -> None:
    from pssh.clients import ParallelSSHClient
    from pssh.config import HostConfig

    config = json.loads(Path(path).read_text())
    hosts = config["hosts"]
    n = len(hosts)
    client = ParallelSSHClient(
        [h["address"] for h in hosts],
        host_config=[
            HostConfig(port=h["port"], user=config["user"], private_key=config["key"])
            for h in hosts
        ],
        pool_size=n,
        timeout=120,
        num_retries=5,
        retry_delay=0.5,
    )
    t0 = time.perf_counter()
    client.connect_auth()
    client.join()
    first = poll(client, n)
    warm_s = time.perf_counter() - t0
    bad = [
        i
        for i, h in enumerate(first)
        if len(h["gpus"]) != config["gpus"]
        or sorted(p.get("user") or "?" for p in h["processes"]) != sorted(config["owners"])
    ]
    if bad:
        raise SystemExit(f"baseline saw wrong data on hosts {bad[:5]}: {first[bad[0]]}")
    times, busy = [], []
    for _ in range(config["repeats"]):
        busy0, t0 = machine_cpu_s(), time.perf_counter()
        poll(client, n)
        times.append(time.perf_counter() - t0)
        busy.append(machine_cpu_s() - busy0)
    result = {
        "baseline_s": statistics.median(times),
        "runs": times,
        "warm_s": warm_s,
        "machine_cpu_s": statistics.median(busy),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
