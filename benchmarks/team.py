"""Team-mode benchmark: many users booking at once through the Hub's proxy into the service.

Run: `.venv/bin/python benchmarks/team.py [--quick | --smoke]` (`--smoke`: 3 users × 3
bookings, 0.2 s apart).
A real JupyterHub (fixtures/team_hub.py: the examples/jupyterhub_config.py deployment,
configurable-http-proxy from npm) with the gpuhive service on a real PostgreSQL. N users
(threads; --quick: 10, else 50), each with their own Hub token (`access:services!service=
gpuhive`), book one GPU for one hour over keep-alive connections to
`{hub}/services/gpuhive/api/reservations`: most bookings go to random GPUs and hours,
about a quarter race for a few hot slots (the same GPU and hour for many users at once).
Every POST re-checks its token with the Hub (writes are never served from the token cache).

Two phases with the same users: *paced* (each user books every --period s, 1 s by default,
from a random phase: 50 users offer 50 bookings/s, far above human booking rates; latency
counted from the planned send time) and *saturation* (closed loop: each user sends the
next booking as soon as the last is answered; this measures capacity, and latency there
is mostly queueing). The top-level figures of the JSON line are the paced phase's, the
closed-loop ones are under "saturation".

Reported: throughput (requests/s, and successful bookings/s), latency p50/p99 of all
POSTs, outcome counts (201 booked, 409 lost a race / slot taken) and `double_bookings`:
pairs of live reservation_gpus rows on the same GPU whose times overlap, counted in
PostgreSQL afterwards (must be 0). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

# This directory holds benchmarks/queue.py, which would shadow the standard library's queue.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from sqlalchemy import create_engine, text  # noqa: E402

from tests.support.postgres import running_postgres  # noqa: E402
from tests.support.server import percentile  # noqa: E402
from tests.support.team_hub import TeamHub  # noqa: E402

UTC = timezone.utc
HOSTS, GPUS_PER_HOST = 16, 4
HOT_SLOTS = 4  # GPUs × hours that everybody races for
HOT_SHARE = 0.25

DOUBLE_BOOKINGS = """
SELECT count(*) FROM reservation_gpus a
JOIN reservation_gpus b
  ON a.gpu_id = b.gpu_id AND a.reservation_id < b.reservation_id
 AND a.start_at < b.end_at AND b.start_at < a.end_at
WHERE NOT a.cancelled AND NOT b.cancelled
"""


def hosts() -> list[dict[str, Any]]:
    return [
        {"name": f"gpu{h}", "address": "127.0.0.1", "transport": "local",
         "gpu_count": GPUS_PER_HOST, "gpu_model": "Simulated A100"}
        for h in range(1, HOSTS + 1)
    ]  # fmt: skip


class User(threading.Thread):
    """One user: a keep-alive connection to the proxy, their own token, R bookings."""

    def __init__(
        self,
        port: int,
        prefix: str,
        token: str,
        requests: int,
        seed: int,
        go: threading.Event,
        period: float = 0.0,
        hot_hour: int = 0,
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.prefix, self.token = port, prefix, token
        self.requests, self.go, self.period = requests, go, period
        self.hot_hour = hot_hour
        self.rng = random.Random(seed)
        self.base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
        self.latencies: list[float] = []
        self.codes: dict[int, int] = {}
        self.errors: list[str] = []

    def body(self) -> dict[str, Any]:
        if self.rng.random() < HOT_SHARE:
            slot = self.rng.randrange(HOT_SLOTS)
            gpu = f"gpu1:{slot % GPUS_PER_HOST}"
            hour = self.hot_hour + slot // GPUS_PER_HOST
        else:
            gpu = f"gpu{self.rng.randint(2, HOSTS)}:{self.rng.randrange(GPUS_PER_HOST)}"
            hour = self.rng.randrange(24 * 25)
        start = self.base + timedelta(hours=hour)
        return {
            "title": "bench",
            "gpus": [gpu],
            "start": start.isoformat(),
            "end": (start + timedelta(hours=1)).isoformat(),
        }

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"Authorization": f"token {self.token}", "Content-Type": "application/json"}
        path = self.prefix + "api/reservations"
        conn.request("GET", self.prefix + "api/me", headers=headers)  # connect + warm the cache
        conn.getresponse().read()
        self.go.wait()
        # Paced: one booking every `period` s from a random phase; latency is counted from
        # the planned send time (a late send counts its wait: no coordinated omission).
        planned = time.perf_counter() + (self.rng.uniform(0, self.period) if self.period else 0)
        for _ in range(self.requests):
            payload = json.dumps(self.body())
            if self.period:
                time.sleep(max(0.0, planned - time.perf_counter()))
            started = planned if self.period else time.perf_counter()
            planned += self.period
            try:
                conn.request("POST", path, body=payload, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException) as error:
                self.errors.append(repr(error))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                continue
            self.latencies.append(time.perf_counter() - started)
            self.codes[response.status] = self.codes.get(response.status, 0) + 1
        conn.close()


def phase(
    hub: TeamHub, tokens: list[str], per_user: int, period: float, seed: int, hot_hour: int
) -> dict[str, Any]:
    """All users at once: closed loop (period 0) or one booking per user every `period` s."""
    go = threading.Event()
    threads = [
        User(hub.port, hub.service_prefix, token, per_user, seed + i, go, period, hot_hour)
        for i, token in enumerate(tokens)
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # all connected and warm
    t0 = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    latencies = [x for t in threads for x in t.latencies]
    codes: dict[int, int] = {}
    for thread in threads:
        for code, count in thread.codes.items():
            codes[code] = codes.get(code, 0) + count
    booked = codes.get(201, 0)
    return {
        "users": len(tokens),
        "requests": len(latencies),
        "seconds": round(elapsed, 3),
        "throughput_rps": round(len(latencies) / elapsed, 1),
        "bookings_per_s": round(booked / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2) if latencies else None,
        "booked": booked,
        "conflicts": codes.get(409, 0),
        "other_status": {str(k): v for k, v in sorted(codes.items()) if k not in (201, 409)},
        "transport_errors": sum(len(t.errors) for t in threads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 users instead of 50")
    parser.add_argument("--users", type=int, help="number of concurrent users")
    parser.add_argument("--requests", type=int, help="bookings per user and phase")
    parser.add_argument(
        "--period", type=float, default=1.0, help="paced phase: seconds between a user's bookings"
    )
    parser.add_argument("--smoke", action="store_true", help="3 users × 3 bookings: that it runs")
    args = parser.parse_args()
    users = args.users or (3 if args.smoke else 10 if args.quick else 50)
    per_user = args.requests or (3 if args.smoke else 20 if args.quick else 40)
    if args.smoke:
        args.period = 0.2

    with running_postgres() as cluster:
        db_url = cluster.new_database()
        names = {f"user{i:03d}": ["lab"] for i in range(users)}
        print(f"starting JupyterHub with the gpuhive service ({users} users) …", flush=True)
        hub = TeamHub(
            db_url,
            names,
            service_settings={"hosts": hosts(), "db_workers": 16},
            log_level="WARN",
        )
        started = time.perf_counter()
        hub.start()
        print(f"hub + service up in {time.perf_counter() - started:.1f} s", flush=True)
        try:
            tokens = [hub.token_for(n, ["access:services!service=gpuhive"]) for n in names]
            paced = phase(hub, tokens, per_user, args.period, seed=0, hot_hour=0)
            burst = phase(hub, tokens, per_user, 0.0, seed=10_000, hot_hour=1)
        finally:
            hub.cleanup()
        engine = create_engine(db_url)
        with engine.connect() as conn:
            doubles = int(conn.execute(text(DOUBLE_BOOKINGS)).scalar_one())
            stored = conn.execute(
                text("SELECT count(*) FROM reservations WHERE cancelled_at IS NULL")
            ).scalar_one()
        engine.dispose()

    result = {
        "benchmark": "team",
        **paced,
        "period_s": args.period,
        "offered_rps": round(users / args.period, 1),
        "saturation": burst,
        "stored_live_reservations": int(stored),
        "double_bookings": doubles,
        "target_met": paced["p99_ms"] <= 100 and doubles == 0,
        "path": "client -> configurable-http-proxy -> gpuhive service -> Hub (token) + PostgreSQL",
    }
    for name, figures in (("paced", paced), ("saturation (closed loop)", burst)):
        print(
            f"{name}: {users} users × {per_user}: {figures['throughput_rps']} req/s "
            f"({figures['bookings_per_s']} bookings/s), p50 {figures['p50_ms']} ms, "
            f"p99 {figures['p99_ms']} ms; booked {figures['booked']}, 409 {figures['conflicts']}"
        )
    print(f"double bookings: {doubles}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
