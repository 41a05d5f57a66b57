"""Reservation benchmark: create latency, week query and the double-booking race.

Run: `.venv/bin/python benchmarks/reservations.py [--quick]` (or `make bench`).
With N existing reservations over 256 GPUs (64 hosts × 4) it measures, through the REST
API of a real Jupyter server in its own process, on SQLite and on a real PostgreSQL:
- create latency p50/p99, against the floor of the same server answering `GET me`;
- the week-calendar query for all GPUs;
- 50 clients racing for overlapping slots (across two server processes on the same
  database): stored overlaps must be 0, every loser must get 409; and, as the baseline,
  TensorHive's check-then-insert pattern run by 50 threads on the same database.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, insert, text

from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import reservation_gpus, reservation_stats, reservations
from tests.support.postgres import running_postgres
from tests.support.server import Client, JupyterServer, summary_ms

UTC = timezone.utc
HOSTS, GPUS_PER_HOST = 64, 4
CLIENTS = 50
USERS = {f"tok-user{i}": {"name": f"user{i}", "groups": ["lab"]} for i in range(CLIENTS)}
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
HOST_SPECS = [{"name": f"node{h:02d}", "gpu_count": GPUS_PER_HOST} for h in range(HOSTS)]

OVERLAPS_SQL = """
SELECT count(*) FROM reservation_gpus a JOIN reservation_gpus b
  ON a.gpu_id = b.gpu_id AND a.reservation_id < b.reservation_id
 AND NOT a.cancelled AND NOT b.cancelled
 AND a.start_at < b.end_at AND b.start_at < a.end_at
"""


def seed(url: str, count: int) -> int:
    """Fill the store with `count` reservations, ~1 per GPU per day, past and future."""
    store = Store(url).open()
    store.inventory.sync(parse_hosts(HOST_SPECS))
    gpu_ids = [g.id for g in store.inventory.gpus()]
    rng = random.Random(7)
    per_gpu = count // len(gpu_ids)
    rows, links = [], []
    rid = 0
    for gid in gpu_ids:
        cursor = NOW - timedelta(days=per_gpu // 2)
        for _ in range(per_gpu):
            cursor += timedelta(hours=rng.randint(0, 24))
            length = timedelta(hours=rng.randint(2, 12))
            rid += 1
            rows.append(
                {"id": rid, "owner": f"user{rng.randrange(CLIENTS)}", "title": f"run {rid}",
                 "description": "", "start_at": cursor, "end_at": cursor + length,
                 "created_at": NOW, "flagged": False}
            )  # fmt: skip
            links.append(
                {"reservation_id": rid, "gpu_id": gid, "device_id": gid, "start_at": cursor,
                 "end_at": cursor + length, "cancelled": False}
            )  # fmt: skip
            cursor += length

    def work(conn: Any) -> None:
        for i in range(0, len(rows), 5000):
            conn.execute(insert(reservations), rows[i : i + 5000])
            conn.execute(insert(reservation_gpus), links[i : i + 5000])
        conn.execute(reservation_stats.update().values(longest_seconds=12 * 3600 + 1))
        if store.db.dialect == "postgresql":
            conn.execute(text("SELECT setval('reservations_id_seq', :n)"), {"n": rid})

    store.db.write(work)
    store.close()
    return rid


def measure_api(port: int, creates: int) -> dict[str, Any]:
    alice = Client(port, "tok-user0")
    floor = [alice.call("GET", "me")[2] for _ in range(creates)]
    latencies, failures = [], 0
    base = NOW + timedelta(days=200)
    for i in range(creates):
        gpu = f"node{i % HOSTS:02d}:{(i // HOSTS) % GPUS_PER_HOST}"
        start = base + timedelta(hours=2 * (i // (HOSTS * GPUS_PER_HOST)))
        status, _, elapsed = alice.call(
            "POST",
            "reservations",
            {"title": f"bench {i}", "gpus": [gpu], "start": start.isoformat(), "duration": "1h"},
        )
        failures += status != 201
        latencies.append(elapsed)
    week_start = NOW - timedelta(days=NOW.weekday(), hours=NOW.hour)
    week_end = week_start + timedelta(days=7)
    query = f"reservations?start={week_start.isoformat()}&end={week_end.isoformat()}&limit=10000"
    query = query.replace("+", "%2B")
    week, shown = [], 0
    for _ in range(20):
        status, body, elapsed = alice.call("GET", query)
        assert status == 200, body
        shown = len(body["reservations"])
        week.append(elapsed)
    overview_q = f"overview?start={week_start.isoformat()}&end={week_end.isoformat()}&slot=1h"
    overview = [alice.call("GET", overview_q.replace("+", "%2B"))[2] for _ in range(10)]
    return {
        "floor_ms": summary_ms(floor),
        "create_ms": summary_ms(latencies),
        "create_failures": failures,
        "week_query_ms": summary_ms(week),
        "week_reservations": shown,
        "overview_week_ms": summary_ms(overview),
    }


def race(ports: list[int], url: str) -> dict[str, Any]:
    """50 clients at once for overlapping slots on the same 4 GPUs."""
    rng = random.Random(11)
    base = NOW + timedelta(days=250)
    bodies = []
    for i in range(CLIENTS):
        gpus = rng.sample([f"node00:{g}" for g in range(GPUS_PER_HOST)], rng.randint(1, 3))
        start = base + timedelta(minutes=30 * rng.randint(0, 6))
        bodies.append({"title": f"race {i}", "gpus": gpus, "start": start.isoformat(),
                       "duration": f"{rng.randint(1, 3)}h"})  # fmt: skip
    clients = [Client(ports[i % len(ports)], f"tok-user{i}") for i in range(CLIENTS)]
    for c in clients:
        c.call("GET", "me")  # connect and authenticate before the start line
    barrier = threading.Barrier(CLIENTS)
    statuses: list[int] = [0] * CLIENTS

    def run(i: int) -> None:
        barrier.wait()
        statuses[i] = clients[i].call("POST", "reservations", bodies[i])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine = create_engine(url)
    with engine.connect() as conn:
        overlaps = conn.execute(text(OVERLAPS_SQL)).scalar()
    engine.dispose()
    return {
        "won": statuses.count(201),
        "refused_409": statuses.count(409),
        "other": CLIENTS - statuses.count(201) - statuses.count(409),
        "double_bookings": int(overlaps or 0),
    }


def naive_race(url: str) -> dict[str, Any]:
    """Baseline: TensorHive's check-then-insert, 50 threads, same database, no constraint."""
    engine = create_engine(url, pool_size=CLIENTS, max_overflow=0)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS naive_bookings"))
        conn.execute(
            text("CREATE TABLE naive_bookings (gpu INTEGER, start_at INTEGER, end_at INTEGER)")
        )
    barrier = threading.Barrier(CLIENTS)
    errors = [0]

    def run(i: int) -> None:
        start = (i % 7) * 30
        end = start + 60 * (1 + i % 3)
        with engine.connect() as conn:
            barrier.wait()
            try:
                clash = conn.execute(
                    text("SELECT count(*) FROM naive_bookings WHERE gpu = 0 "
                         "AND start_at < :e AND end_at > :s"), {"s": start, "e": end}
                ).scalar()  # fmt: skip
                if not clash:
                    conn.execute(
                        text("INSERT INTO naive_bookings VALUES (0, :s, :e)"),
                        {"s": start, "e": end},
                    )
                conn.commit()
            except Exception:
                errors[0] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with engine.connect() as conn:
        overlaps = conn.execute(
            text("SELECT count(*) FROM naive_bookings a JOIN naive_bookings b ON a.rowid < b.rowid "
                 "AND a.start_at < b.end_at AND b.start_at < a.end_at")
            if url.startswith("sqlite")
            else text("SELECT count(*) FROM naive_bookings a JOIN naive_bookings b ON a.ctid < b.ctid "
                      "AND a.start_at < b.end_at AND b.start_at < a.end_at")
        ).scalar()  # fmt: skip
        conn.execute(text("DROP TABLE naive_bookings"))
        conn.commit()
    engine.dispose()
    return {"double_bookings": int(overlaps or 0), "errors": errors[0]}


def run_backend(name: str, url: str, count: int, creates: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    seeded = seed(url, count)
    print(f"[{name}] seeded {seeded} reservations in {time.perf_counter() - t0:.1f}s", flush=True)
    config = {
        "db_url": url,
        "hosts": HOST_SPECS,
        "booking_horizon": "400d",
        "max_reservation": "7d",
        "site_timezone": "UTC",
    }
    servers = [JupyterServer(config, USERS), JupyterServer(config, USERS)]
    try:
        figures = measure_api(servers[0].port, creates)
        print(f"[{name}] api: {json.dumps(figures)}", flush=True)
        figures["race"] = race([s.port for s in servers], url)
        print(f"[{name}] race: {json.dumps(figures['race'])}", flush=True)
    finally:
        for s in servers:
            s.stop()
    figures["naive_race"] = naive_race(url)
    print(f"[{name}] naive check-then-insert: {json.dumps(figures['naive_race'])}", flush=True)
    figures["existing_reservations"] = seeded
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k reservations, 200 creates")
    parser.add_argument("--smoke", action="store_true", help="1,000 reservations, 20 creates")
    args = parser.parse_args()
    count, creates = (10_000, 200) if args.quick else (100_000, 1000)
    if args.smoke:
        count, creates = 1000, 20
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = run_backend(
            "sqlite", f"sqlite:///{Path(tmp) / 'bench.sqlite'}", count, creates
        )
    with running_postgres() as cluster:
        results["postgresql"] = run_backend("postgresql", cluster.new_database(), count, creates)
    s, p = results["sqlite"], results["postgresql"]
    final = {
        "existing_reservations": s["existing_reservations"],
        "gpus": HOSTS * GPUS_PER_HOST,
        "create_p50_ms": s["create_ms"]["p50"],
        "create_p99_ms": s["create_ms"]["p99"],
        "floor_p50_ms": s["floor_ms"]["p50"],
        "create_ratio_to_floor": round(s["create_ms"]["p50"] / s["floor_ms"]["p50"], 2),
        "week_query_ms": s["week_query_ms"]["p50"],
        "week_reservations": s["week_reservations"],
        "overview_week_ms": s["overview_week_ms"]["p50"],
        "pg_create_p50_ms": p["create_ms"]["p50"],
        "pg_create_p99_ms": p["create_ms"]["p99"],
        "pg_week_query_ms": p["week_query_ms"]["p50"],
        "race_clients": CLIENTS,
        "race_losers_409": s["race"]["refused_409"] + p["race"]["refused_409"],
        "race_other_status": s["race"]["other"] + p["race"]["other"],
        "double_bookings": s["race"]["double_bookings"] + p["race"]["double_bookings"],
        "double_bookings_sqlite": s["race"]["double_bookings"],
        "double_bookings_postgresql": p["race"]["double_bookings"],
        "baseline_double_bookings": s["naive_race"]["double_bookings"]
        + p["naive_race"]["double_bookings"],
        "quick": args.quick,
    }
    print(json.dumps(final))


if __name__ == "__main__":
    main()
