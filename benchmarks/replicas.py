"""Site-scale benchmark (issue #33): two gpuhive replicas behind haproxy, as a site runs them.

Run: `.venv/bin/python benchmarks/replicas.py [--quick | --smoke]` (full: about 6-8 minutes
on a 2-core machine; `--quick`: 50 users, shorter steps, 3-4 minutes; `--smoke`: 2 hosts,
8 users, 300 seeded bookings, 2-second steps: that it runs, under a minute).

Everything is started here, from the deployment recipe's own files (examples/deploy/, through
tests/support/deploy.py, the same code tests/hub/test_deploy_replicas.py uses): a real
PostgreSQL, JupyterHub with configurable-http-proxy (examples/jupyterhub_config.py with the
recipe's Hub drop-in: the service's route points at haproxy, a fixed service token; the
Hub's own database in that PostgreSQL, as docs/how-to/replicas.md sets a site up), two
replicas started as the recipe's gpuhive@.service says (both outside the Hub, as systemd
would run them; the Hub starts none), Debian's haproxy with the recipe's haproxy.cfg
(round-robin, health checks on each replica's health port). Monitoring is on (poll
interval 2 s; `--smoke` 1 s) over 20 simulated hosts
× 8 GPUs (`local` transport, the nvidia-smi stand-in of jupyter_gpuhive/sim; `--smoke`: 2);
what runs "on" a simulated host (the probe loop's shell and `ps`, the stand-in, job
launches) runs at the lowest priority (`at_lowest_priority`, `host_side_at_lowest_priority`):
at a site it is the GPU hosts' work, on their own CPUs;
200 Hub users (`--quick`: 50, `--smoke`: 8), each with their own Hub token
(`access:services!service=gpuhive`). The load generator is in this process: asyncio and
aiohttp, every request through haproxy (as users' servers in client mode call it), a client
timeout of 2 s per attempt, like a real client.

The mix (open loop: requests arrive paced as a Poisson process at a set rate, whatever the
answers; latency counts from the planned arrival): 70 % reads (GET hosts 50 %, GET
reservations of a week 35 %, GET jobs?user=<the user> 15 %: a sidebar's call; until
2026-11-28 it was GET jobs, everyone's newest 200), 25 % writes (POST reservations 70 %,
DELETE of one of the user's own acknowledged bookings 30 %), 5 % job submissions (POST
jobs). Creating
POSTs carry an `Idempotency-Key` (a UUID, also the booking's title and the job's name) and
are retried with the same key as the project's own client (HiveClient) does: after a busy
answer (503, 429, or 409 with Retry-After) when Retry-After says (at most 10 s), after a lost
one (timeout, connection error, haproxy's 502/504) 1, 2, 4, 8 s later; 4 retries at most.
A request is *good* when it ends in an answer below 500 other than 429 (a 409 for a slot
already taken is a good answer) within its attempts.

The figures (the last line printed is one JSON object with exactly these names):
- `hosts_live_ratio`: GET hosts polled through haproxy (80 times, `--smoke` 20, 0.1 s apart,
  so both replicas answer; the replica that answered is in haproxy's X-Gpuhive-Replica
  header): the share of answers in which every host is up, has an `updated_at` at most
  3 poll intervals old, and shows its 8 GPUs. Target 1.0.
- `hosts_cpu_ratio_10k`: process CPU time (utime + stime of /proc/PID/stat, all threads) of
  the answering replica per GET hosts, sent directly to the replica that is not the leader
  (no sweeps run there), 200 requests one after another (`--smoke` 40), less that
  replica's idle CPU over the same time (measured just before), with 10,000 upcoming
  reservations (`--smoke` 300; written straight into PostgreSQL, over the next 30 days on
  every GPU, then deleted) over the same with none. Target <= 1.5.
- `goodput_ratio_overload`: saturation is found by stepping the arrival rate (8 s per
  step, `--quick` 5 s, `--smoke` 2 s; between runs, until no replica has a request in flight
  (their health ports' `in_flight`), then 3 s of quiet); the saturating rate is
  the highest step whose goodput (good requests/s) was at least 95 % of the offered rate,
  the peak goodput the best of any step. Then twice the saturating rate is offered (16 s,
  `--quick` 10 s, `--smoke` 3 s): its goodput over the peak. Target >= 0.9.
- `p99_ms_at_half_saturation`: p99 latency of every request of the mix at half the
  saturating rate (same duration, run before the overload; a request that timed out counts
  its full time). Target
  <= 100. Printed before it: the floor, GET PREFIX/health (no token, no database) through
  haproxy at the same pacing, i.e. what this machine and the stack's plumbing cost then,
  and the p99 of each kind of request.
- `unacknowledged_writes`: after the load (once no request is in flight), the bookings and jobs
  in PostgreSQL whose key (their title / name) no attempt of their client ever saw
  acknowledged (a 2xx). Target 0. Duplicates (two rows of one key) and the cancels applied
  whose client saw them fail are printed on the lines before.
- `duplicate_violations_after_failover`: a booking of gpu1:0 by user0000 starting now, a
  process of another account (root) on that simulated GPU; once the leader recorded the
  violation and 2 sweeps passed, the leader replica is killed (SIGKILL of its process
  group); after takeover and 3 more sweeps: violation rows for that GPU beyond one, plus
  notices (violation_actions rows) beyond one per (handler, ladder step). Target 0.
- `takeover_s`: from that SIGKILL until the other replica's /health says `"leader": true`
  (polled every 20 ms). Target <= the poll interval (2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

# This directory holds benchmark modules whose names could shadow the standard library's.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import aiohttp  # noqa: E402
from sqlalchemy import create_engine, insert, text  # noqa: E402

from jupyter_gpuhive.sim.cluster import LocalSimHost, start_gpu_process  # noqa: E402
from jupyter_gpuhive.sim.inventory import SimGpu, SimHostConfig, make_uuid  # noqa: E402
from jupyter_gpuhive.store.schema import reservation_gpus, reservations  # noqa: E402
from tests.support.deploy import Replica, ReplicaStack  # noqa: E402
from tests.support.postgres import running_postgres  # noqa: E402
from tests.support.server import percentile  # noqa: E402
from tests.support.team_hub import call  # noqa: E402

GPUS_PER_HOST = 8
ATTEMPT_TIMEOUT = 2.0
TIMEOUT_HEADER = f"{ATTEMPT_TIMEOUT:g}"
# As HiveClient (jupyter_gpuhive/client.py) retries a POST: 4 retries; a busy answer (503,
# 429, or 409 with Retry-After) after the seconds it names (at most 10), a lost one (timeout,
# connection error, haproxy's 502/504) after 1, 2, 4, 8 s.
RETRIES = 4
LONGEST_WAIT = 10.0
LOST_STATUS = {502, 504}
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
START = time.perf_counter()


@dataclass(frozen=True)
class Size:
    hosts: int
    users: int
    seeded: int
    polls: int
    cpu_calls: int
    step_s: float
    overload_s: float
    rates: tuple[int, ...]
    poll_interval: float = 2.0
    quiet_s: float = 3.0


SIZES = {
    "full": Size(20, 200, 10_000, 80, 200, 8.0, 16.0, (20, 40, 60, 80, 100, 130, 160, 200, 250)),
    "quick": Size(20, 50, 10_000, 80, 200, 5.0, 10.0, (20, 40, 60, 80, 100, 130, 160, 200)),
    "smoke": Size(2, 8, 300, 20, 40, 2.0, 3.0, (10, 20), poll_interval=1.0, quiet_s=1.0),
}


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:6.1f}s] {message}", flush=True)


# --- the simulated hosts -------------------------------------------------------------------


def sim_hosts(count: int, workdir: Path, *, lowest: bool = True) -> list[LocalSimHost]:
    """`count` simulated hosts; `lowest`: their nvidia-smi at the lowest priority (below)."""
    hosts = []
    for h in range(1, count + 1):
        name = f"gpu{h}"
        gpus = [
            SimGpu(i, make_uuid(name, "GPU", i), "NVIDIA A100-SXM4-80GB", 81920)
            for i in range(GPUS_PER_HOST)
        ]
        config = SimHostConfig(name, gpus, "535.129.03", "12.2")
        host = LocalSimHost(name, workdir / name, config)
        if lowest:
            at_lowest_priority(host.bin_dir / "nvidia-smi")
            host_side_at_lowest_priority(host.bin_dir)
        hosts.append(host)
    return hosts


def at_lowest_priority(command: Path) -> None:
    """Run `command` at the lowest priority: the simulated hosts stand in for other machines.

    Nice alone is not enough: with the kernel's autogroups (`kernel.sched_autogroup_enabled`,
    on in Debian) CPU is shared fairly between *sessions*, and nice only orders processes
    within one. The stand-in ran in the leader replica's session, so each sweep's 20
    `nvidia-smi` runs took a full share of the two cores from both replicas, every poll
    interval: the p99 of every kind of request, on both replicas, was about 0.5 s, all of it
    in bursts at the poll interval. So each run gets a session of its own (`setsid`), whose
    autogroup is set to nice 19 too (a machine without autogroups only has the nice).
    """
    real = command.with_name(command.name + ".sim")
    command.rename(real)
    inner = 'echo 19 > /proc/self/autogroup 2>/dev/null; exec nice -n 19 "$0" "$@"'
    command.write_text(
        f'#!/bin/sh\nexec setsid -w sh -c {shlex.quote(inner)} {shlex.quote(str(real))} "$@"\n'
    )
    command.chmod(0o755)


def host_side_at_lowest_priority(bin_dir: Path) -> None:
    """Everything the `local` transport runs for a simulated host, at the lowest priority.

    The transport runs `sh -c COMMAND`, `sh` found on the host's PATH (its bin dir first):
    the probe loop (the shell itself, `ps`, its parsing) and the job launches (`screen`).
    At a site that is the GPU host's work, on the GPU host. Here the loops, with the
    stand-ins they run, took about 0.8 of one of the two cores at 65 requests/s, the loops'
    own shells and `ps` at normal priority, each loop in a session (so an autogroup) of its
    own (`spawn` starts one per loop): the floor (GET health) had a p99 of 45-55 ms, 13-28
    ms with this. The loop already leads its own session, so this wrapper
    only sets that session's autogroup and its own nice (no `setsid`: the transport ends a
    loop by its process group, which must stay the wrapper's).
    """
    wrapper = bin_dir / "sh"
    inner = 'echo 19 > /proc/self/autogroup 2>/dev/null; exec nice -n 19 /bin/sh "$@"'
    wrapper.write_text(f"#!/bin/sh\n{inner}\n")
    wrapper.chmod(0o755)


def host_specs(hosts: list[LocalSimHost]) -> list[dict[str, Any]]:
    specs = []
    for host in hosts:
        env = host.env()
        specs.append({"name": host.name, "transport": "local", "env": {k: env[k] for k in SIM_ENV}})
    return specs


# --- live state ---------------------------------------------------------------------------


def replica_header(headers: Any) -> str:
    return str(headers.get("X-Gpuhive-Replica") or headers.get("x-gpuhive-replica") or "")


def is_live(body: Any, hosts: int, now: datetime, interval: float) -> bool:
    """Every host up, with a recent updated_at and all its GPUs."""
    listed = body.get("hosts") if isinstance(body, dict) else None
    if not listed or len(listed) != hosts:
        return False
    for host in listed:
        stamp = host.get("updated_at")
        if host.get("state") != "up" or not stamp or len(host.get("gpus") or ()) != GPUS_PER_HOST:
            return False
        age = (now - datetime.fromisoformat(stamp)).total_seconds()
        if age > 3 * interval:
            return False
    return True


def wait_discovered(stack: ReplicaStack, token: str, hosts: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = call("GET", stack.balancer_url + "api/hosts", token, timeout=10)
        if (
            reply.status == 200
            and sum(len(h.get("gpus") or ()) for h in reply.body.get("hosts", ()))
            == hosts * GPUS_PER_HOST
            and any(h.get("updated_at") for h in reply.body["hosts"])
        ):
            return
        time.sleep(0.5)
    raise TimeoutError("the leader never discovered every simulated GPU")


def measure_live(
    stack: ReplicaStack, token: str, hosts: int, polls: int, interval: float
) -> dict[str, Any]:
    live, per_replica = 0, {}
    for _ in range(polls):
        reply = call("GET", stack.balancer_url + "api/hosts", token, timeout=10)
        ok = reply.status == 200 and is_live(reply.body, hosts, datetime.now(UTC), interval)
        live += ok
        name = replica_header(reply.headers)
        seen = per_replica.setdefault(name, [0, 0])
        seen[0] += ok
        seen[1] += 1
        time.sleep(0.1)
    return {"ratio": live / polls, "per_replica": per_replica}


# --- GET hosts CPU against upcoming bookings ------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hosts_cpu(replica: Replica, token: str, calls: int) -> dict[str, float]:
    """CPU seconds of `replica` per GET hosts, less its idle CPU over the same time."""
    url = replica.url("api/hosts")
    for _ in range(3):
        call("GET", url, token, timeout=30)
    idle_began, idle_cpu = time.perf_counter(), cpu_seconds(replica.pid)
    time.sleep(2.0)
    idle_rate = (cpu_seconds(replica.pid) - idle_cpu) / (time.perf_counter() - idle_began)
    began, cpu = time.perf_counter(), cpu_seconds(replica.pid)
    walls = []
    for _ in range(calls):
        t = time.perf_counter()
        reply = call("GET", url, token, timeout=30)
        walls.append(time.perf_counter() - t)
        assert reply.status == 200, reply
    wall = time.perf_counter() - began
    spent = cpu_seconds(replica.pid) - cpu - idle_rate * wall
    return {
        "cpu_ms": round(max(spent, 0.0) / calls * 1000, 2),
        "wall_p50_ms": round(percentile(walls, 50) * 1000, 2),
        "idle_cpu_share": round(idle_rate, 3),
    }


def seed_upcoming(db_url: str, count: int) -> None:
    """`count` future reservations on every GPU over the next 30 days, straight into the DB."""
    engine = create_engine(db_url)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    rng = random.Random(7)
    with engine.begin() as conn:
        gpu_ids = [row[0] for row in conn.execute(text("SELECT id FROM gpus ORDER BY id"))]
        first = int(conn.execute(text("SELECT coalesce(max(id), 0) FROM reservations")).scalar())
        per_gpu = -(-count // len(gpu_ids))
        span = timedelta(days=29) / per_gpu
        rows, links = [], []
        rid = first
        for n in range(count):
            gid = gpu_ids[n % len(gpu_ids)]
            slot = n // len(gpu_ids)
            start = now + timedelta(hours=1) + span * slot + timedelta(minutes=rng.randrange(30))
            end = start + min(span * 0.8, timedelta(hours=4))
            rid += 1
            rows.append(
                {"id": rid, "owner": f"user{n % 50:04d}", "title": f"seed {rid}",
                 "description": "", "start_at": start, "end_at": end, "created_at": now,
                 "flagged": False}
            )  # fmt: skip
            links.append(
                {"reservation_id": rid, "gpu_id": gid, "device_id": gid, "start_at": start,
                 "end_at": end, "cancelled": False}
            )  # fmt: skip
        for i in range(0, len(rows), 5000):
            conn.execute(insert(reservations), rows[i : i + 5000])
            conn.execute(insert(reservation_gpus), links[i : i + 5000])
        conn.execute(text("SELECT setval('reservations_id_seq', :n)"), {"n": rid})
    engine.dispose()


def unseed(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM reservations WHERE title LIKE 'seed %'"))
    engine.dispose()


def follower(stack: ReplicaStack) -> Replica:
    leaders = stack.leaders()
    return next(r for r in stack.replicas if r.name not in leaders)


# --- the load generator --------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str
    good: bool
    latency: float
    status: str
    replica: str = ""  # that answered the last attempt (haproxy's header), "" if none did


@dataclass
class Ledger:
    """What clients saw: acknowledged keys, every key sent, cancels."""

    acked: set[str] = field(default_factory=set)
    sent: set[str] = field(default_factory=set)
    gave_up: int = 0
    retries: int = 0
    own: dict[int, list[int]] = field(default_factory=dict)  # user -> acked booking ids
    cancel_failed: set[int] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)


class Load:
    """Open-loop arrivals of the mix through haproxy, one aiohttp session."""

    def __init__(
        self, base: str, tokens: list[str], names: list[str], hosts: int, seed: int
    ) -> None:
        self.base, self.tokens, self.names, self.hosts = base, tokens, names, hosts
        self.rng = random.Random(seed)
        self.ledger = Ledger()
        self.day0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
        self.floor = False  # True: every request is GET PREFIX/health (no token, no database)
        self.session: aiohttp.ClientSession | None = None
        self.tasks: set[asyncio.Task[Outcome]] = set()

    async def __aenter__(self) -> Load:
        connector = aiohttp.TCPConnector(limit=2000, force_close=False)
        self.session = aiohttp.ClientSession(connector=connector)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.drain()
        assert self.session is not None
        await self.session.close()

    async def drain(self) -> None:
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def _gpu(self) -> str:
        return f"gpu{self.rng.randint(1, self.hosts)}:{self.rng.randrange(GPUS_PER_HOST)}"

    def _pick(self) -> tuple[str, str, str, Any, int]:
        """(kind, method, path, body, user) of the next request of the mix."""
        user = self.rng.randrange(len(self.tokens))
        if self.floor:
            return "floor", "GET", "/health", None, user
        r = self.rng.random()
        if r < 0.70:
            pick = self.rng.random()
            if pick < 0.50:
                return "read", "GET", "hosts", None, user
            if pick < 0.85:
                start = datetime.now(UTC)
                window = {
                    "start": start.isoformat(),
                    "end": (start + timedelta(days=7)).isoformat(),
                }
                return "read", "GET", f"reservations?{urlencode(window)}", None, user
            return "read", "GET", f"jobs?user={self.names[user]}", None, user  # as a sidebar
        if r < 0.95:
            mine = self.ledger.own.get(user)
            if mine and self.rng.random() < 0.30:
                rid = mine.pop(self.rng.randrange(len(mine)))
                return "cancel", "DELETE", f"reservations/{rid}", rid, user
            start = self.day0 + timedelta(hours=self.rng.randrange(24 * 25))
            body = {"gpus": [self._gpu()], "start": start.isoformat(), "duration": "1h"}
            return "book", "POST", "reservations", body, user
        body = {"template": "plain", "gpus": [self._gpu()], "command": "true"}
        return "job", "POST", "jobs", body, user

    async def _send(
        self, method: str, path: str, token: str, body: Any, key: str | None
    ) -> tuple[int | str, Any, float | None, str]:
        assert self.session is not None
        # how long this attempt waits: the replica changes nothing after it (counted from
        # haproxy's X-Request-Start), so a write is applied only if its answer can arrive
        headers = {"Authorization": f"token {token}", "Gpuhive-Client-Timeout": TIMEOUT_HEADER}
        if key:
            headers["Idempotency-Key"] = key
        timeout = aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT)
        try:
            async with self.session.request(
                method,
                self.base + (path[1:] if path.startswith("/") else "api/" + path),
                json=body,
                headers=headers,
                timeout=timeout,
            ) as response:
                data = await response.read()
                named = response.headers.get("Retry-After")
                retry_after = float(named) if named is not None else None
                # Only what the client acts on is parsed (a write's answer, an error): the
                # load generator shares the two cores with the stack, and parsing every read
                # (100-300 KB each) took its CPU at 100 req/s from 0.9 to 2.6 s per 16 s.
                wanted = method != "GET" or response.status >= 300
                parsed = json.loads(data) if data and wanted else None
                return response.status, parsed, retry_after, replica_header(response.headers)
        except (TimeoutError, asyncio.TimeoutError):
            return "timeout", None, None, ""
        except (aiohttp.ClientError, ValueError, OSError) as error:
            return type(error).__name__, None, None, ""

    async def one(self, planned: float) -> Outcome:
        kind, method, path, body, user = self._pick()
        token = self.tokens[user]
        key = None
        if kind in ("book", "job"):
            key = str(uuid.uuid4())
            body = {**body, ("title" if kind == "book" else "name"): f"load {key}"}
            self.ledger.sent.add(key)
        delay = max(0.0, planned - time.perf_counter())
        await asyncio.sleep(delay)
        status: int | str = "none"
        data: Any = None
        replica = ""
        lost = 0
        for attempt in range(RETRIES + 1 if key else 1):
            status, data, retry_after, replica = await self._send(method, path, token, body, key)
            busy = status in (503, 429) or (status == 409 and retry_after is not None)
            if isinstance(status, int) and status not in LOST_STATUS and not busy:
                break
            if not key or attempt == RETRIES:
                break
            self.ledger.retries += 1
            if busy:
                await asyncio.sleep(min(retry_after or 1.0, LONGEST_WAIT))
            else:
                await asyncio.sleep(2.0**lost)
                lost += 1
        label = f"{kind} {status}"
        self.ledger.statuses[label] = self.ledger.statuses.get(label, 0) + 1
        good = isinstance(status, int) and status < 500 and status != 429
        ok = isinstance(status, int) and 200 <= status < 300
        if key:
            if ok:
                self.ledger.acked.add(key)
                if kind == "book" and isinstance(data, dict) and "id" in data:
                    self.ledger.own.setdefault(user, []).append(int(data["id"]))
            elif not isinstance(status, int) or status >= 500 or status == 429:
                self.ledger.gave_up += 1
        if kind == "cancel" and not ok:
            self.ledger.cancel_failed.add(int(body))
        return Outcome(kind, good, time.perf_counter() - planned, str(status), replica)

    async def run(self, rate: float, seconds: float) -> dict[str, Any]:
        """Offer `rate` requests/s for `seconds` (Poisson arrivals); figures of those requests."""
        began = time.perf_counter()
        planned, arrivals = began, []
        while True:
            planned += self.rng.expovariate(rate)
            if planned - began > seconds:
                break
            arrivals.append(planned)
        mine: list[asyncio.Task[Outcome]] = []
        for at in arrivals:
            wait = at - 0.002 - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            task = asyncio.create_task(self.one(at))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            mine.append(task)
        outcomes = await asyncio.gather(*mine)
        good = [o for o in outcomes if o.good]
        latencies = [o.latency for o in outcomes]

        def p99(keep: Any, p: float = 99) -> float:
            return round(percentile([o.latency for o in outcomes if keep(o)], p) * 1000, 1)

        by_kind = {k: p99(lambda o, k=k: o.kind == k) for k in sorted({o.kind for o in outcomes})}
        p50_by_kind = {
            k: p99(lambda o, k=k: o.kind == k, 50) for k in sorted({o.kind for o in outcomes})
        }
        by_replica = {
            r: p99(lambda o, r=r: o.replica == r) for r in sorted({o.replica for o in outcomes})
        }
        return {
            "offered_rps": rate,
            "requests": len(outcomes),
            "goodput_rps": round(len(good) / seconds, 1),
            "good_share": round(len(good) / max(1, len(outcomes)), 3),
            "p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "p99_ms_by_kind": by_kind,
            "p50_ms_by_kind": p50_by_kind,
            "p99_ms_by_replica": by_replica,
        }


async def settle(stack: ReplicaStack, quiet: float, timeout: float = 60) -> None:
    """Wait until no replica has a request in flight (their health ports say), then `quiet` s.

    Work whose client left goes on until the replica's request deadline: through haproxy a
    replica does not see its client leave, so a run right after an overload would measure
    the overload's leftovers.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = 0
        for replica in stack.replicas:
            with contextlib.suppress(OSError):
                reply = await asyncio.to_thread(replica.probe)
                if isinstance(reply.body, dict):
                    busy += int(reply.body.get("in_flight") or 0)
        if busy == 0:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(quiet)


async def load_phases(
    stack: ReplicaStack, tokens: list[str], names: list[str], size: Size, hosts: int
) -> tuple[dict[str, Any], Ledger]:
    log(f"leader during the load: {', '.join(sorted(stack.leaders()))}")
    async with Load(stack.balancer_url, tokens, names, hosts, seed=1) as load:
        steps = []
        for rate in size.rates:
            step = await load.run(rate, size.step_s)
            steps.append(step)
            log(f"step {rate} req/s offered: {step}")
            await settle(stack, size.quiet_s)
            if step["goodput_rps"] < 0.8 * rate:
                break  # well past saturation
        saturating = max(
            (s["offered_rps"] for s in steps if s["goodput_rps"] >= 0.95 * s["offered_rps"]),
            default=size.rates[0],
        )
        peak = max(s["goodput_rps"] for s in steps)
        load.floor = True  # the same pacing, GET PREFIX/health only: the stack's own floor
        floor = await load.run(saturating / 2, size.step_s)
        load.floor = False
        log(f"floor (GET health through haproxy) at {saturating / 2} req/s: {floor}")
        await settle(stack, size.quiet_s)
        half = await load.run(saturating / 2, size.overload_s)
        log(f"half saturation at {saturating / 2} req/s: {half}")
        await settle(stack, size.quiet_s)
        over = await load.run(2 * saturating, size.overload_s)
        log(f"overload at {2 * saturating} req/s: {over}")
        await load.drain()
        await settle(stack, size.quiet_s)
        figures = {
            "steps": steps,
            "saturating_rps": saturating,
            "peak_goodput_rps": peak,
            "overload": over,
            "half": half,
        }
        return figures, load.ledger


def writes_unacknowledged(db_url: str, ledger: Ledger) -> dict[str, int]:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        booked = [
            r[0][5:]
            for r in conn.execute(text("SELECT title FROM reservations WHERE title LIKE 'load %'"))
        ]
        jobs = [
            r[0][5:] for r in conn.execute(text("SELECT name FROM jobs WHERE name LIKE 'load %'"))
        ]
        cancelled = {
            r[0]
            for r in conn.execute(
                text("SELECT id FROM reservations WHERE cancelled_at IS NOT NULL")
            )
        }
    engine.dispose()
    keys = booked + jobs
    return {
        "bookings": len(booked),
        "jobs": len(jobs),
        "unacknowledged": sum(1 for k in keys if k not in ledger.acked),
        "duplicates": len(keys) - len(set(keys)),
        "cancels_seen_failed_but_applied": len(ledger.cancel_failed & cancelled),
    }


# --- failover --------------------------------------------------------------------------------


def violations_of(db_url: str, gpu: str) -> tuple[int, int, int]:
    """(violation rows of `gpu`, their actions, distinct (handler, step) among them)."""
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = int(
            conn.execute(
                text("SELECT count(*) FROM violations WHERE gpu = :g"), {"g": gpu}
            ).scalar()
        )
        actions = conn.execute(
            text(
                "SELECT a.handler, a.step FROM violation_actions a "
                "JOIN violations v ON v.id = a.violation_id WHERE v.gpu = :g"
            ),
            {"g": gpu},
        ).all()
    engine.dispose()
    return rows, len(actions), len({(h, s) for h, s in actions})


def failover(
    stack: ReplicaStack, db_url: str, token: str, sim: LocalSimHost, interval: float
) -> dict[str, Any]:
    gpu = f"{sim.name}:0"
    start = datetime.now(UTC) + timedelta(seconds=2)
    made = call(
        "POST",
        stack.balancer_url + "api/reservations",
        token,
        {"title": "holder", "gpus": [gpu], "start": start.isoformat(), "duration": "1h"},
    )
    assert made.status == 201, made
    time.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds()) + 0.2)
    offender = start_gpu_process(sim.name, [0], config=sim.config_path, mem_mib=2000, util=50)
    try:
        deadline = time.monotonic() + 60
        while violations_of(db_url, gpu)[0] == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("no violation was recorded for the offender")
            time.sleep(0.2)
        time.sleep(2 * interval)
        before = violations_of(db_url, gpu)
        (leader_name,) = stack.leaders()
        leader = stack.replica(leader_name)
        other = next(r for r in stack.replicas if r is not leader)
        killed_at = time.perf_counter()
        os.killpg(leader.pid, signal.SIGKILL)
        took = None
        while time.perf_counter() - killed_at < 30:
            with contextlib.suppress(OSError):
                reply = other.health(timeout=1)
                if reply.status == 200 and reply.body.get("leader"):
                    took = time.perf_counter() - killed_at
                    break
            time.sleep(0.02)
        if took is None:
            raise TimeoutError("no replica took over the leadership within 30 s")
        leader.process.wait(5) if leader.process else None
        time.sleep(3 * interval + 1)
        rows, actions, distinct = violations_of(db_url, gpu)
    finally:
        offender.kill()
        offender.wait(5)
    return {
        "takeover_s": round(took, 3),
        "before_kill": {"rows": before[0], "actions": before[1]},
        "after": {"rows": rows, "actions": actions, "distinct_steps": distinct},
        "duplicates": max(0, rows - 1) + max(0, actions - distinct),
    }


# --- the run ---------------------------------------------------------------------------------


def make_tokens(stack: ReplicaStack, names: list[str]) -> list[str]:
    scopes = ["access:services!service=gpuhive"]
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda n: stack.hub.token_for(n, scopes, note="bench"), names))


def measure(size: Size, workdir: Path) -> dict[str, Any]:
    """Start the stack, take every figure, stop it: the result object."""
    # --smoke (make test, beside another benchmark): at the lowest priority a stand-in could
    # starve past the probe timeout behind any busy process, and no smoke figure is read.
    sims = sim_hosts(size.hosts, workdir, lowest=size is not SIZES["smoke"])
    names = [f"user{i:04d}" for i in range(size.users)]
    with running_postgres() as cluster:
        db_url = cluster.new_database()
        settings = {
            "hosts": host_specs(sims),
            "monitor": True,
            "poll_interval": size.poll_interval,
            "db_workers": 16,
        }
        stack = ReplicaStack(
            db_url,
            {n: ["lab"] for n in names},
            service_settings=settings,
            hub_db_url=cluster.new_database(),  # as the recipe sets a site's Hub up
        )
        log(
            "starting PostgreSQL, JupyterHub, 2 replicas, haproxy; "
            f"{size.hosts} hosts × {GPUS_PER_HOST} GPUs, {size.users} users"
        )
        try:
            stack.start(timeout=180)
            log("up; making tokens")
            tokens = make_tokens(stack, names)
            wait_discovered(stack, tokens[0], size.hosts)
            log("every GPU discovered")
            live = measure_live(stack, tokens[0], size.hosts, size.polls, size.poll_interval)
            log(f"GET hosts live: {live}")
            quiet = follower(stack)
            none = hosts_cpu(quiet, tokens[0], size.cpu_calls)
            seed_upcoming(db_url, size.seeded)
            time.sleep(size.poll_interval)
            many = hosts_cpu(quiet, tokens[0], size.cpu_calls)
            unseed(db_url)
            ratio = many["cpu_ms"] / none["cpu_ms"] if none["cpu_ms"] > 0 else float("nan")
            log(f"GET hosts CPU on {quiet.name}: none {none}, {size.seeded} upcoming {many}")
            figures, ledger = asyncio.run(load_phases(stack, tokens, names, size, size.hosts))
            time.sleep(size.quiet_s + 2)
            writes = writes_unacknowledged(db_url, ledger)
            log(
                f"writes: {writes}; keys sent {len(ledger.sent)}, acknowledged "
                f"{len(ledger.acked)}, given up {ledger.gave_up}, retries {ledger.retries}"
            )
            log(f"outcomes: {dict(sorted(ledger.statuses.items()))}")
            health = {r.name: r.probe().body for r in stack.replicas}
            log(f"replicas' health after the load: {health}")
            fail = failover(stack, db_url, tokens[0], sims[0], size.poll_interval)
            log(f"failover: {fail}")
        except BaseException:
            for replica in stack.replicas:
                print(f"--- {replica.name} ---\n{replica.log_tail(3000)}", file=sys.stderr)
            raise
        finally:
            stack.cleanup()
    peak = figures["peak_goodput_rps"]
    return {
        "hosts_live_ratio": round(live["ratio"], 3),
        "hosts_cpu_ratio_10k": round(ratio, 2),
        "goodput_ratio_overload": round(figures["overload"]["goodput_rps"] / peak, 3),
        "unacknowledged_writes": writes["unacknowledged"],
        "duplicate_violations_after_failover": fail["duplicates"],
        "takeover_s": fail["takeover_s"],
        "p99_ms_at_half_saturation": figures["half"]["p99_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 users, shorter steps")
    parser.add_argument("--smoke", action="store_true", help="2 hosts, 8 users: that it runs")
    args = parser.parse_args()
    size = SIZES["smoke" if args.smoke else "quick" if args.quick else "full"]
    workdir = Path(tempfile.mkdtemp(prefix="gpuhive-replicas-"))
    os.chmod(workdir, 0o755)
    log(f"load average before: {os.getloadavg()} (this machine is shared: other work counts)")
    try:
        result = measure(size, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    log(f"load average after: {os.getloadavg()}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
