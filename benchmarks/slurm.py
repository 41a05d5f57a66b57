"""gpuhive in front of a real Slurm cluster (issue #47): its jobs, kernels and bookings against
Slurm's own clients, and whether they hold end to end.

Run: ``.venv/bin/python benchmarks/slurm.py [--smoke]`` (as root, with Debian's slurmctld,
slurmd, slurm-client and munge: `make sysdeps`). It starts the test suite's own cluster
(tests/support/slurm.py: one slurmctld, two slurmd with four fake GPUs each, in a temporary
folder), then in the same run:

1. Jobs. It holds node n1 for an account as gpuhive's bookings do, and
   - submits `--smoke` 3 (else 20) tasks through gpuhive's Slurm runner (the start script as
     the owner: log folder, env file, the `squeue` check for a run of that name, `sbatch` in
     the booking's reservation) and as many plain `sbatch --wrap` of the same account, in turn;
   - reads their states through the runner's `sync` (one `squeue` of the owner plus the exit
     files) and through a plain `squeue` of the owner, in turn;
   - checks end to end: every task ran as the owner, in the reservation, with its GPUs pinned
     by Slurm, wrote its log and exit status, and was seen to succeed; a long task is stopped.
2. Kernels: benchmarks/slurm_kernels.py's `figures` on the same cluster, `--smoke` 1 (else 3)
   starts and 20 (else 200) executes of a reservation kernel on n1 and a local one.
3. Bookings, through the REST API of a real gpuhive server (tests/support/server.py) in front
   of both nodes, polling every POLL_S seconds, as the real users gh-alice and gh-bob:
   - `--smoke` 3 (else 20) bookings of n1: from each one's 201 to `scontrol show reservation`
     listing `gpuhive-ID` (it is created before the 201, so this is the read's own time);
   - `--smoke` 1 (else 5) bookings of n2 whose reservation root deletes with scontrol: until
     gpuhive put it back in Slurm; then deleted again with root's own reservation taking the
     node at once: until the owner's GET reservations/ID shows the booking released;
   - a race of `--smoke` 8 (else 60) seconds: alice and bob book whole nodes through gpuhive
     (starting 3 to 20 s later, 5 minutes long, most cancelled again) while bob submits jobs
     with sbatch and root creates and deletes reservations with scontrol on the same nodes;
     every ~0.2 s Slurm's reservations and running jobs are read, and an instant counts as a
     double booking when a gpuhive reservation and another reservation hold a same node at
     overlapping times, or a job runs outside it on a node of a gpuhive reservation that
     holds it then (a second's margin at its ends: the two reads are two instants).

The last line printed is one JSON object: ``tasks``, ``submit_p50_s``, ``submit_p99_s``,
``baseline_submit_p50_s``, ``submit_overhead_ratio`` (runner p50 over plain sbatch p50),
``status_poll_ms``, ``baseline_status_poll_ms``, ``status_overhead_ratio``, ``checks_passed``
of ``checks``; ``kernel_start_ratio`` (Slurm kernel start p50 over local, at most 3) with
``local_start_p50_s`` and ``slurm_start_p50_s``; ``bookings``, ``booking_to_reservation_s``
(the max over them; at most 2), ``booking_to_reservation_p50_s``, ``booking_post_p50_s``;
``poll_interval_s``, ``drift_noticed_s`` (the max of ``drift_restored_max_s`` and
``drift_released_max_s``; at most one poll interval + 1 s); ``double_bookings`` (instants;
0) with the race's ``race_*`` counts. Where no Slurm cluster can run (not root, Slurm not
installed) it prints why and ``{"skipped": "...", "checks_passed": 0, "checks": 0}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ACCOUNT = "gh-bench"
GPUS_PER_TASK = 1
UNIX = {"alice": "gh-alice", "bob": "gh-bob"}  # the booking users and their accounts
TOKENS = {f"tok-{name}": {"name": name} for name in UNIX}
POLL_S = 2.0  # the server's poll interval: drift is noticed after a sweep
MARGIN = timedelta(seconds=1)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def home() -> Path:
    return Path(f"~{ACCOUNT}").expanduser() / ".gpuhive-bench"


def read_logs(names: list[str]) -> list[str]:
    return [(home() / f"{n}.log").read_text() if (home() / f"{n}.log").exists() else ""
            for n in names]  # fmt: skip


def queued_names(cluster: Any) -> list[str]:
    """The names of the account's jobs that Slurm still queues or runs."""
    listed = subprocess.run([f"{cluster.bin}/squeue", "-h", "-u", ACCOUNT, "-t",
                             "pending,running", "-o", "%j"], env=cluster.env,
                            capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
    return listed.stdout.split()


def reservations(cluster: Any) -> dict[str, Any]:
    """Slurm's reservations now, by name (scontrol show reservation, read in UTC)."""
    from jupyter_gpuhive.hosts.slurm import parse_reservations

    text = cluster.scontrol("show", "reservation", "-o").stdout
    return {r.name: r for r in parse_reservations(text)}


def running_jobs(cluster: Any) -> list[tuple[str, str, str]]:
    """(job id, node, reservation) of each job Slurm runs now (every job here is on one node)."""
    listed = subprocess.run([f"{cluster.bin}/squeue", "-h", "-t", "running", "-o", "%i|%N|%v"],
                            env=cluster.env, capture_output=True, text=True, check=True,
                            timeout=30)  # fmt: skip
    return [tuple(line.split("|", 2)) for line in listed.stdout.splitlines() if line]  # type: ignore[misc]


def conflicts(held: dict[str, Any], jobs: list[tuple[str, str, str]], now: datetime) -> int:
    """Double bookings at `now`: a gpuhive reservation and another reservation on a same node
    whose times overlap, or a job running now on a node of a gpuhive reservation that holds
    it now (with a second's margin either side: two reads are two instants) outside it."""
    found = 0
    ours = [r for r in held.values() if r.name.startswith("gpuhive-")]
    for r in ours:
        for other in held.values():
            if other.name != r.name and set(r.nodes) & set(other.nodes) \
                    and r.start < other.end and other.start < r.end:  # fmt: skip
                found += 1
        if r.start + MARGIN <= now < r.end - MARGIN:
            found += sum(1 for _, node, where in jobs if node in r.nodes and where != r.name)
    return found


def skipped(reason: str) -> dict[str, Any]:
    print(f"slurm: skipped: {reason}")
    return {"skipped": reason, "checks_passed": 0, "checks": 0}


async def measure(cluster: Any, count: int) -> dict[str, Any]:
    from jupyter_gpuhive.hosts.backends.slurm import SlurmBackend, SlurmReservations, settings_of
    from jupyter_gpuhive.hosts.runners import Stopping, TaskStart, Watched
    from jupyter_gpuhive.hosts.ssh import SshSettings
    from jupyter_gpuhive.jobs import commands
    from jupyter_gpuhive.model import HostDecl, utcnow
    from jupyter_gpuhive.model.engines import Held
    from jupyter_gpuhive.model.jobs import GpuSlot, TaskSpec

    decl = HostDecl("n1", transport="slurm",
                    extra={"slurm": {"node": "n1", "conf": str(cluster.conf),
                                     "bin": cluster.bin}})  # fmt: skip
    backend = SlurmBackend(SshSettings(), "root")
    runner = backend.runner(decl)
    _node, where = settings_of(decl)
    now = utcnow()
    hold = Held("gpuhive-1", now, now + timedelta(hours=1), (("n1", 4),), (ACCOUNT,))
    await SlurmReservations(where).hold(hold, now)

    async def shell(script: str, command: str, timeout: float | None) -> Any:
        return await backend.task_run(decl, command, ACCOUNT, timeout or 60, script)

    def launch(name: str, command: str) -> TaskStart:
        base = f"./.gpuhive-bench/{name}"
        spec = TaskSpec("n1", "n1", (GpuSlot("n1", "n1", 0, "GPU-x"),), command,
                        {"CUDA_VISIBLE_DEVICES": "GPU-x"}, {})  # fmt: skip
        body = commands.task_script(spec, f"{base}.log", f"{base}.exit", f"{base}.env")
        return TaskStart(name, body, "./.gpuhive-bench", f"{base}.log", f"{base}.exit",
                         f"{base}.env", commands.env_file(spec), "n1", ACCOUNT,
                         GPUS_PER_TASK, hold.name, hold.end)  # fmt: skip

    def plain(*words: str) -> float:
        started = time.perf_counter()
        subprocess.run(["runuser", "-u", ACCOUNT, "--", *words], env=cluster.env, check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        return time.perf_counter() - started

    command = 'echo "ran as $(id -un) in $SLURM_JOB_RESERVATION gpus=$CUDA_VISIBLE_DEVICES"'
    ours, theirs, names = [], [], []
    for n in range(count):
        name = f"gpuhive-bench-{n}"
        started = time.perf_counter()
        await runner.start(shell, launch(name, command))
        ours.append(time.perf_counter() - started)
        names.append(name)
        theirs.append(plain(f"{cluster.bin}/sbatch", "--parsable", f"--reservation={hold.name}",
                            "--nodelist=n1", f"--gres=gpu:{GPUS_PER_TASK}", "--time=5",
                            "--output=/dev/null", "--wrap=true"))  # fmt: skip
    watched = [Watched(name, f"./.gpuhive-bench/{name}.exit") for name in names]
    polls, plain_polls = [], []
    for _ in range(max(3, count)):
        started = time.perf_counter()
        census = await runner.sync(shell, watched)
        polls.append(time.perf_counter() - started)
        plain_polls.append(plain(f"{cluster.bin}/squeue", "-h", "-u", ACCOUNT))
    # end to end: every task ends with exit status 0, as the owner, in the reservation
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        census = await runner.sync(shell, watched)
        if len(census.exits) == len(names):
            break
        await asyncio.sleep(0.5)
    checks: dict[str, bool] = {}
    checks["every task ended with status 0"] = all(census.exits.get(n) == "0" for n in names)
    logs = await asyncio.to_thread(read_logs, names)
    wanted = re.compile(rf"ran as {ACCOUNT} in {hold.name} gpus=\d\n")
    checks["every log says owner, reservation, Slurm's GPU"] = all(
        wanted.fullmatch(t) for t in logs
    )
    long = launch("gpuhive-bench-long", "sleep 300")
    started_long = await runner.start(shell, long)
    checks["a job id as handle"] = isinstance(started_long.handle, int)
    halted = await runner.stop(shell, [Watched(long.name, long.exit_path)],
                               Stopping(grace=2, patience=2))  # fmt: skip
    listed = await asyncio.to_thread(queued_names, cluster)
    checks["a stopped task leaves Slurm's queue"] = long.name not in listed
    checks["a stopped task writes its exit status"] = long.name in halted.exits
    for what, ok in checks.items():
        print(f"slurm: {'ok' if ok else 'FAILED'}: {what}")
    from benchmarks.slurm_kernels import delete_reservation

    await asyncio.to_thread(delete_reservation, cluster, hold.name)  # n1 free for what follows
    ours_p50, theirs_p50 = statistics.median(ours), statistics.median(theirs)
    poll, plain_poll = statistics.median(polls), statistics.median(plain_polls)
    return {
        "tasks": count,
        "submit_p50_s": round(ours_p50, 4),
        "submit_p99_s": round(percentile(ours, 0.99), 4),
        "baseline_submit_p50_s": round(theirs_p50, 4),
        "submit_overhead_ratio": round(ours_p50 / theirs_p50, 3),
        "status_poll_ms": round(poll * 1000, 1),
        "baseline_status_poll_ms": round(plain_poll * 1000, 1),
        "status_overhead_ratio": round(poll / plain_poll, 3),
        "checks_passed": sum(checks.values()),
        "checks": len(checks),
    }


def listed(cluster: Any, name: str) -> Any:
    """A check: does Slurm list reservation `name`?"""
    return lambda: name in reservations(cluster)


def released_check(client: Any, rid: int) -> Any:
    """A check: does the owner see booking `rid` released (cancelled_at)?"""
    return lambda: client.call("GET", f"reservations/{rid}")[1].get("cancelled_at") is not None


def whole(node: str) -> list[str]:
    from tests.support.slurm import GPUS_PER_NODE

    return [f"{node}:{i}" for i in range(GPUS_PER_NODE)]


def book(client: Any, node: str, start: datetime, duration: str) -> tuple[int, Any, float]:
    """POST reservations: the whole node from `start` (as the client's user)."""
    return client.call("POST", "reservations", {"title": "bench", "gpus": whole(node),  # type: ignore[no-any-return]
                                                "start": start.isoformat(), "duration": duration})  # fmt: skip


def waited(check: Any, timeout: float, what: str, pause: float = 0.02) -> float:
    """Seconds until `check()` is true (polled every `pause` s)."""
    began = time.perf_counter()
    while not check():
        if time.perf_counter() - began > timeout:
            raise RuntimeError(f"not within {timeout} s: {what}")
        time.sleep(pause)
    return time.perf_counter() - began


def serve(cluster: Any) -> Any:
    """A real gpuhive server in front of the cluster's two nodes, polling every POLL_S."""
    from tests.support.server import JupyterServer
    from tests.support.slurm import NODES

    hosts = [{"name": node, "transport": "slurm",
              "slurm": {"node": node, "conf": str(cluster.conf), "bin": cluster.bin}}
             for node in NODES]  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="gpuhive-bench-slurm-"))
    config = {"db_url": f"sqlite:///{folder / 'hive.sqlite'}", "hosts": hosts,
              "unix_users": UNIX, "poll_interval": POLL_S}  # fmt: skip
    return JupyterServer(config, TOKENS)


def bookings_to_reservations(
    cluster: Any, alice: Any, count: int
) -> tuple[list[float], list[float]]:
    """Seconds from each booking's 201 to Slurm listing its reservation, and the POSTs' own."""
    after, posts = [], []
    base = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    for n in range(count):
        status, body, took = book(alice, "n1", base + timedelta(hours=2 * n), "1h")
        assert status == 201, body
        name = f"gpuhive-{body['id']}"
        after.append(waited(listed(cluster, name), 10, f"{name} in Slurm"))
        posts.append(took)
        assert alice.call("DELETE", f"reservations/{body['id']}")[0] == 200
    return after, posts


def drift(cluster: Any, alice: Any, count: int) -> tuple[list[float], list[float]]:
    """Each of `count` bookings' reservation deleted in Slurm, twice: seconds until gpuhive put
    it back in Slurm; then, with root's reservation on the node meanwhile, seconds until its
    owner sees the booking released (GET reservations/ID: cancelled_at)."""
    restored: list[float] = []
    released: list[float] = []
    base = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    n = 0
    while len(released) < count:
        n += 1
        start = base + timedelta(hours=2 * n)
        status, body, _ = book(alice, "n2", start, "1h")
        assert status == 201, body
        rid, name = body["id"], f"gpuhive-{body['id']}"
        waited(listed(cluster, name), 10, f"{name} in Slurm")
        began = time.perf_counter()
        cluster.scontrol("delete", f"reservationname={name}")
        waited(listed(cluster, name), 30, f"{name} restored")
        restored.append(time.perf_counter() - began)
        began = time.perf_counter()
        cluster.scontrol("delete", f"reservationname={name}")
        taken = cluster.scontrol("create", "reservation", f"reservationname=root-{n}",
                                 "users=root", "nodes=n2", f"starttime={start:%Y-%m-%dT%H:%M:%S}",
                                 "duration=60", check=False)  # fmt: skip
        if taken.returncode != 0:  # gpuhive restored it in between: another try
            continue

        waited(released_check(alice, rid), 30, f"booking {rid} released", 0.05)
        released.append(time.perf_counter() - began)
        cluster.scontrol("delete", f"reservationname=root-{n}")
    return restored, released


def race(cluster: Any, port: int, seconds: float) -> dict[str, int]:
    """For `seconds`: alice and bob book whole nodes through gpuhive (and cancel some), bob
    submits Slurm jobs with sbatch and root creates and deletes reservations with scontrol,
    all at once on the same two nodes; every ~0.2 s Slurm's reservations and running jobs
    are read. What was done, and the instants with a double booking."""
    import random

    from tests.support.server import Client
    from tests.support.slurm import NODES

    nodes = sorted(NODES)
    stop = threading.Event()
    failed: list[BaseException] = []
    refusals: dict[str, str] = {}  # the kinds of refusal, each with one example
    done = {"bookings_made": 0, "bookings_refused": 0, "slurm_jobs": 0, "root_reservations": 0}
    lock = threading.Lock()

    def count(key: str) -> None:
        with lock:
            done[key] += 1

    def booker(user: str) -> None:
        client, mine, rng = Client(port, f"tok-{user}"), [], random.Random(user)
        while not stop.is_set():
            start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=rng.randint(3, 20))
            status, body, _ = book(client, rng.choice(nodes), start, "5m")
            if status == 201:
                count("bookings_made")
                mine.append(body["id"])
            else:
                count("bookings_refused")
                refusals.setdefault(str(body.get("message", body))[:30], str(body))
            if mine and rng.random() < 0.7:  # gaps for Slurm's jobs and root's reservations
                client.call("DELETE", f"reservations/{mine.pop(0)}")
            time.sleep(rng.uniform(0.1, 0.6))

    def submitter() -> None:
        rng = random.Random(2)
        while not stop.is_set():
            ran = subprocess.run(["runuser", "-u", UNIX["bob"], "--", f"{cluster.bin}/sbatch",
                                  "--parsable", f"--nodelist={rng.choice(nodes)}", "--gres=gpu:1",
                                  "--time=1", "--output=/dev/null", "--wrap=sleep 2"],
                                 env=cluster.env, capture_output=True, timeout=30)  # fmt: skip
            if ran.returncode == 0:
                count("slurm_jobs")
            time.sleep(0.3)

    def admin() -> None:
        rng, made = random.Random(3), []
        for n in range(10**6):
            if stop.is_set():
                return
            start = datetime.now(UTC) + timedelta(seconds=rng.randint(3, 30))
            name = f"root-race-{n}"
            if cluster.scontrol("create", "reservation", f"reservationname={name}", "users=root",
                                f"nodes={rng.choice(nodes)}",
                                f"starttime={start:%Y-%m-%dT%H:%M:%S}", "duration=1",
                                check=False).returncode == 0:  # fmt: skip
                count("root_reservations")
                made.append(name)
            if made and rng.random() < 0.5:
                cluster.scontrol("delete", f"reservationname={made.pop(0)}", check=False)
            time.sleep(0.5)

    def minding(work: Any, *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                work(*args)
            except BaseException as error:  # the race is void: said after
                failed.append(error)
                stop.set()

        return threading.Thread(target=run)

    workers = [minding(booker, user) for user in UNIX]
    workers += [minding(submitter), minding(admin)]
    for worker in workers:
        worker.start()
    instants = doubled = with_jobs = with_ours = 0
    ends = time.monotonic() + seconds
    try:
        while time.monotonic() < ends and not stop.is_set():
            held = reservations(cluster)
            jobs = running_jobs(cluster)
            instants += 1
            with_jobs += bool(jobs)
            with_ours += any(name.startswith("gpuhive-") for name in held)
            doubled += conflicts(held, jobs, datetime.now(UTC)) > 0
            time.sleep(0.2)
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
        subprocess.run([f"{cluster.bin}/scancel", "-u", UNIX["bob"]], env=cluster.env,
                       capture_output=True, timeout=30)  # fmt: skip
    for said in refusals.values():
        print(f"slurm: a booking refused in the race: {said[:300]}")
    if failed:
        raise RuntimeError(f"the race stopped: {failed[0]!r}") from failed[0]
    return {**done, "instants": instants, "instants_with_running_jobs": with_jobs,
            "instants_with_gpuhive_reservations": with_ours, "double_bookings": doubled}  # fmt: skip


def booking_figures(cluster: Any, smoke: bool) -> dict[str, Any]:
    """The figures of bookings through a real gpuhive server (its REST API)."""
    from jupyter_gpuhive.sim.users import ensure_user
    from tests.support.server import Client

    for account in UNIX.values():
        ensure_user(account)
    server = serve(cluster)
    try:
        alice = Client(server.port, "tok-alice")

        def both_nodes() -> bool:
            hosts = alice.call("GET", "hosts")[1]["hosts"]
            return len(hosts) == 2 and all(len(h["gpus"]) == len(whole("n1")) for h in hosts)

        waited(both_nodes, 60, "both nodes' GPUs read from Slurm", 0.2)
        after, posts = bookings_to_reservations(cluster, alice, 3 if smoke else 20)
        restored, released = drift(cluster, alice, 1 if smoke else 5)
        raced = race(cluster, server.port, 8 if smoke else 60)
    finally:
        server.stop()
    return {
        "bookings": len(after),
        "booking_to_reservation_s": round(max(after), 4),
        "booking_to_reservation_p50_s": round(statistics.median(after), 4),
        "booking_post_p50_s": round(statistics.median(posts), 4),
        "poll_interval_s": POLL_S,
        "drift_noticed_s": round(max(restored + released), 3),
        "drift_restored_max_s": round(max(restored), 3),
        "drift_released_max_s": round(max(released), 3),
        "double_bookings": raced.pop("double_bookings"),
        **{f"race_{key}": value for key, value in raced.items()},
    }


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    args = parser.parse_args()
    from jupyter_gpuhive.sim.users import ensure_user
    from tests.support.slurm import running_slurm, unavailable_reason

    reason = unavailable_reason()
    if reason:
        return skipped(reason)
    ensure_user(ACCOUNT)
    shutil.rmtree(home(), ignore_errors=True)  # logs are appended to: start with none
    from benchmarks.slurm_kernels import figures as kernel_figures

    with running_slurm() as cluster:
        found = asyncio.run(measure(cluster, 3 if args.smoke else 20))
        kernels = asyncio.run(kernel_figures(cluster, *((1, 20) if args.smoke else (3, 200))))
        found |= {"kernel_start_ratio": kernels["kernel_start_ratio"],
                  "local_start_p50_s": kernels["local_start_p50_s"],
                  "slurm_start_p50_s": kernels["slurm_start_p50_s"]}  # fmt: skip
        found |= booking_figures(cluster, args.smoke)
    return found


if __name__ == "__main__":
    print(json.dumps(main()))
