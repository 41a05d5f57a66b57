"""Sweep benchmark: one full monitoring sweep with HostPool against its floor and TensorHive's.

Run: ``.venv/bin/python benchmarks/sweep.py [--quick]`` as root (it creates test users and a
monitoring login; needs ``openssh-server``, and ``pip install parallel-ssh`` into the venv for
the baseline — not a project dependency).

1. 100 real sshd hosts (``--quick``: 10) on loopback, 4 simulated GPUs each, 2 GPU processes per
   host owned by real test users, the ``nvidia-smi`` stand-in answering after 0.3 s
   (``--stand-in replay``, the default: a shell script replaying answers recorded from the real
   stand-in for every argument set asked, see sweep_sshd.py; ``--stand-in sim``: the real
   stand-in, which reads /proc on every call and makes the sweeps CPU-bound here). Over open
   connections: ``sweep_s`` = gpuhive's ``Sampler.sweep()`` (one request per host to its kept
   probe loop, ``PROBE_LOOP_COMMAND``; parse; record); ``floor_s`` = the floor the issue names:
   a bare ``asyncio.gather`` of one ``conn.run(PROBE_COMMAND)`` (the same probe, one-shot) per
   host on pre-opened asyncssh connections; ``stream_floor_s`` = the same pattern as ours with
   nothing else: a bare gather of token write + ``readuntil`` on pre-opened loop sessions
   (``ratio_to_stream_floor`` is the pool's own overhead). Medians, the three interleaved.
2. ``baseline_s``: TensorHive's polling pattern with parallel-ssh on the same hosts (see
   sweep_baseline.py), in its own process.
3. ``sweep_1000_s``: our pool over 1,000 hosts (``--quick``: 100) served by an asyncssh server in
   another process (see sweep_fixture.py), no delay.
4. ``loop_lag_p99_ms``: the event loop's lag (10 ms sleeps, overshoot) during a real-host sweep;
   ``loop_lag_1000_p99_ms`` the same during a fixture sweep.
5. ``api_*``: a real Jupyter server with gpuhive monitoring the same sshd hosts every 5 s, its
   ``me`` and ``hosts`` endpoints each called 10 times a second for 30 s (``--quick``: 10 s)
   while its sampler sweeps (see sweep_api.py; ``--api-seconds 0`` skips it). The simulated
   hosts are set apart from the server and the client in this phase (a CPU cgroup of least
   weight, as remote machines would be; ``api_hosts_apart`` says how, ``--api-hosts-shared``
   turns it off).

The simulated hosts share this machine's CPU with the client. With ``sim`` every stand-in call
is a Python process reading /proc (~15-60 ms CPU), so on 2 cores the real-host sweeps measure
CPU, not the polling pattern. ``replay`` answers with ``sh`` + ``sleep`` + ``cat`` and is the
same script for our probe and the baseline, so the comparison stays fair (``"stand_in"`` in
the JSON line says which ran).
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sweep_api import measure_api
from sweep_fixture import fixture_server, measure_fixture
from sweep_sshd import (
    GPUS_PER_HOST,
    MONITOR_ALIAS,
    TEST_USERS,
    RealCluster,
    install_replay,
    measure_real,
    monitor_account,
    start_cluster,
)

HERE = Path(__file__).resolve().parent
START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:6.1f}s] {message}", flush=True)


def run_baseline(real: RealCluster, repeats: int) -> dict[str, Any]:
    """TensorHive's pattern with parallel-ssh, in a subprocess (gevent stays out of asyncio)."""
    config = {
        "hosts": [{"address": h.address, "port": h.port} for h in real.cluster],
        "user": real.monitor,
        "key": str(real.cluster.client_key),
        "gpus": GPUS_PER_HOST,
        "owners": list(TEST_USERS),
        "repeats": repeats,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(config, f)
        f.flush()
        done = subprocess.run(
            [sys.executable, str(HERE / "sweep_baseline.py"), f.name],
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"baseline_error": " | ".join(tail)}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    runs = ", ".join(f"{r:.2f}" for r in result["runs"])
    log(
        f"baseline (parallel-ssh, TensorHive pattern): runs {runs} s, "
        f"first poll incl. connect {result['warm_s']:.2f} s"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 sshd hosts, 100 fixture hosts")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="2 sshd hosts, 10 fixture hosts, one repeat, an 8 s API phase: that it runs",
    )
    parser.add_argument("--hosts", type=int, help="real sshd hosts (default 100, quick 10)")
    parser.add_argument("--fixture-hosts", type=int, help="fixture hosts (1000, quick 100)")
    parser.add_argument("--delay", type=float, default=0.3, help="stand-in delay in seconds")
    parser.add_argument(
        "--stand-in",
        choices=("replay", "sim"),
        default="replay",
        help="nvidia-smi on the hosts: recorded answers replayed by a shell script (default), "
        "or the simulator itself (reads /proc on every call)",
    )
    parser.add_argument(
        "--api-seconds", type=float, help="API phase length (default 30, quick 10; 0: skip)"
    )
    parser.add_argument(
        "--api-nice",
        type=int,
        default=0,
        help="diagnostic: nice value for the API phase's server (-10: ahead of the hosts)",
    )
    parser.add_argument(
        "--api-hosts-shared",
        action="store_true",
        help="diagnostic: in the API phase let the simulated hosts compete for the CPU at equal "
        "weight with the server and the measuring client (default: set apart, as remote "
        "machines are; see sweep_api._hosts_set_apart)",
    )
    parser.add_argument("--repeats", type=int, help="timed sweeps per figure (default 2, quick 3)")
    parser.add_argument(
        "--monitor-user",
        default=MONITOR_ALIAS,
        help="login for the real hosts: a uid-0 alias with /bin/sh made for the run (default), "
        "or 'root' as is (its shell rc is part of every command then)",
    )
    args = parser.parse_args()
    hosts = args.hosts or (2 if args.smoke else 10 if args.quick else 100)
    fixture_hosts = args.fixture_hosts or (10 if args.smoke else 100 if args.quick else 1000)
    repeats = args.repeats or (1 if args.smoke else 3 if args.quick else 2)  # 100 sim hosts: ~10 s
    api_default = 8.0 if args.smoke else 10.0 if args.quick else 30.0
    api_seconds = api_default if args.api_seconds is None else args.api_seconds
    replay = args.stand_in == "replay"

    out: dict[str, Any] = {"hosts": hosts}
    with monitor_account(args.monitor_user) as monitor:
        log(
            f"starting {hosts} sshd hosts (login {monitor}, stand-in {args.stand_in}, "
            f"delay {args.delay} s)"
        )
        real = start_cluster(hosts, monitor, 0.0 if replay else args.delay)
        api: dict[str, Any] = {}
        try:
            if replay:
                recorded = install_replay(real, args.delay)
                log(f"replay stand-in installed: {recorded} answers recorded from the simulator")
            log("cluster up; sweeping with the pool and the floor")
            real_fig = asyncio.run(measure_real(real, repeats, log))
            log("baseline: parallel-ssh, TensorHive's pattern")
            base = run_baseline(real, repeats)
            if api_seconds > 0:
                log("API phase: a Jupyter server with gpuhive sweeping the same hosts")
                api = measure_api(
                    real,
                    api_seconds,
                    log,
                    delay_s=args.delay,
                    nice=args.api_nice,
                    hosts_apart=not args.api_hosts_shared,
                )
        finally:
            real.stop()
    log(f"starting the asyncssh fixture with {fixture_hosts} hosts")
    with fixture_server(fixture_hosts) as fx:
        fix_fig = asyncio.run(measure_fixture(fx, max(3, repeats), log))

    sweep_s, floor_s = real_fig["sweep_s"], real_fig["floor_s"]
    baseline_s = base.get("baseline_s")
    out.update(
        {
            "sweep_s": round(sweep_s, 3),
            "floor_s": round(floor_s, 3),
            "ratio_to_floor": round(sweep_s / floor_s, 3),
            "stream_floor_s": round(real_fig["stream_floor_s"], 3),
            "ratio_to_stream_floor": round(sweep_s / real_fig["stream_floor_s"], 3),
            "baseline_s": round(baseline_s, 3) if baseline_s else None,
            "speedup_vs_baseline": round(baseline_s / sweep_s, 2) if baseline_s else None,
            "sweep_1000_s": round(fix_fig["sweep_s"], 3),
            "fixture_hosts": fixture_hosts,
            "loop_lag_p99_ms": round(real_fig["loop_lag_p99_ms"], 1),
            "loop_lag_max_ms": round(real_fig["loop_lag_max_ms"], 1),
            "loop_lag_1000_p99_ms": round(fix_fig["loop_lag_p99_ms"], 1),
            "sweep_client_cpu_s": round(real_fig["sweep_client_cpu_s"], 3),
            "floor_client_cpu_s": round(real_fig["floor_client_cpu_s"], 3),
            "sweep_1000_client_cpu_s": round(fix_fig["client_cpu_s"], 3),
            "sweep_machine_cpu_s": round(real_fig["sweep_machine_cpu_s"], 1),
            "floor_machine_cpu_s": round(real_fig["floor_machine_cpu_s"], 1),
            "stream_floor_machine_cpu_s": round(real_fig["stream_floor_machine_cpu_s"], 1),
            "baseline_machine_cpu_s": round(base["machine_cpu_s"], 1) if baseline_s else None,
            **api,
            "stand_in": args.stand_in,
            "stand_in_delay_s": args.delay,
            "monitor_user": args.monitor_user,
            "baseline_tool": "parallel-ssh" if baseline_s else None,
            "repeats": repeats,
            "quick": args.quick,
            "total_s": round(time.perf_counter() - START, 1),
            **({"baseline_error": base["baseline_error"]} if "baseline_error" in base else {}),
        }
    )
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
