"""Fair-share benchmark: booking latency with limits, the race of one user against a limit,
and the accounting report of a year.

Run: `.venv/bin/python benchmarks/fairshare.py [--quick | --smoke]`. Through the REST API of real
Jupyter servers in their own processes, on SQLite and on a real PostgreSQL, with the store of
the reservation benchmark (10k reservations with --quick, else 100k, over 256 GPUs):
- create latency p50/p99 without any limit, then with limits stored for every one of the 50
  users and a site default (the same server and store, one phase after the other);
- 50 clients of ONE user, across two server processes, racing to book against that user's
  limits (10 GPU-hours in any 7 days; 3 GPUs at once): what is stored above a limit counts
  as an overrun (target 0);
- (SQLite) one year of hourly usage of 256 GPUs by 50 users (hourly and monthly charges and
  their roll-ups per payer and per host, as the sweeps write them; ~1 reservation per GPU
  per day): GET reports/accounting for the 12 months. The first request also sums each ended
  month's reservations once and keeps them (`report_year_first_ms`); the figure is the
  median of the next five.
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

from sqlalchemy import text

from benchmarks.reservations import CLIENTS, GPUS_PER_HOST, HOST_SPECS, HOSTS, USERS, seed
from jupyter_gpuhive.store import Store
from tests.support.machine import Steal
from tests.support.postgres import running_postgres
from tests.support.server import Client, JupyterServer, summary_ms

UTC = timezone.utc
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
RACER = "racer"
ALL_USERS = {**USERS, "tok-racer": {"name": RACER, "groups": ["lab"]},
             "tok-admin": {"name": "admin", "groups": ["admins"]}}  # fmt: skip
GENEROUS = {"gpus": 256, "gpu_hours_week": 100_000, "upcoming": 100_000, "longest": "7d",
            "horizon": "400d"}  # fmt: skip
RACE_LIMITS = {"gpu_hours_week": 10, "gpus": 3}
LIVE_SQL = """
SELECT rg.start_at, rg.end_at FROM reservation_gpus rg JOIN reservations r
  ON r.id = rg.reservation_id WHERE r.owner = :owner AND NOT rg.cancelled
"""


def creates(port: int, count: int, base: datetime) -> list[float]:
    """`count` one-hour bookings of one GPU each by user0 (none clashes); their latencies."""
    client = Client(port, "tok-user0")
    latencies = []
    for i in range(count):
        gpu = f"node{i % HOSTS:02d}:{(i // HOSTS) % GPUS_PER_HOST}"
        start = base + timedelta(hours=2 * (i // (HOSTS * GPUS_PER_HOST)))
        status, body, elapsed = client.call(
            "POST", "reservations",
            {"title": f"bench {i}", "gpus": [gpu], "start": start.isoformat(), "duration": "1h"},
        )  # fmt: skip
        assert status == 201, body
        latencies.append(elapsed)
    return latencies[10:]  # the first few warm the server's caches


def set_limits(port: int) -> None:
    admin = Client(port, "tok-admin")
    for scope, name, limits in [("default", None, GENEROUS),
                                *[("user", f"user{i}", GENEROUS) for i in range(CLIENTS)],
                                ("user", RACER, RACE_LIMITS)]:  # fmt: skip
        status, body, _ = admin.call("PUT", "limits", {"scope": scope, "name": name,
                                                       "limits": limits})  # fmt: skip
        assert status == 200, body


def race(ports: list[int], url: str) -> dict[str, Any]:
    """50 clients of one user at once: distinct (GPU, slot) pairs, so only limits refuse."""
    base = NOW + timedelta(days=300)
    bodies = []
    for i in range(CLIENTS):
        start = base + timedelta(hours=2 * (i // 12))
        bodies.append({"title": f"race {i}", "gpus": [f"node{i % 12 // 4:02d}:{i % 4}"],
                       "start": start.isoformat(), "duration": "1h"})  # fmt: skip
    clients = [Client(ports[i % len(ports)], "tok-racer") for i in range(CLIENTS)]
    for c in clients:
        c.call("GET", "me")
    barrier = threading.Barrier(CLIENTS)
    replies: list[tuple[int, Any]] = [(0, None)] * CLIENTS

    def run(i: int) -> None:
        barrier.wait()
        status, body, _ = clients[i].call("POST", "reservations", bodies[i])
        replies[i] = (status, body)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = Store(url)
    with store.db.read() as conn:
        rows = conn.execute(text(LIVE_SQL), {"owner": RACER}).all()
    store.close()
    spans = [(_instant(a), _instant(b)) for a, b in rows]
    hours = sum((b - a).total_seconds() / 3600 for a, b in spans)
    at_once = _most_at_once(spans)
    named = sum(1 for s, b in replies if s in (409, 422) and b.get("limit") in RACE_LIMITS)
    return {
        "won": sum(1 for s, _ in replies if s == 201),
        "refused_naming_the_limit": named,
        "other": sum(
            1 for s, b in replies if s != 201 and not (s in (409, 422) and b.get("limit"))
        ),
        "gpu_hours_stored": round(hours, 3),
        "most_gpus_at_once": at_once,
        "overruns": max(0, round(hours) - RACE_LIMITS["gpu_hours_week"])
        + max(0, at_once - RACE_LIMITS["gpus"]),
    }


def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    count = best = 0
    for _, delta in events:
        count += delta
        best = max(best, count)
    return best


FIGURES = ("seconds", "used_seconds", "util_seconds", "energy_j", "unmetered_seconds")


def _bulk(conn: Any, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """executemany straight to the driver (SQLAlchemy's per-row work would dominate)."""
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"
    for i in range(0, len(rows), 50_000):
        conn.exec_driver_sql(sql, rows[i : i + 50_000])


def seed_year(url: str, year: int, gpus: int | None = None) -> int:
    """A year of hourly usage of every GPU (the first `gpus`) by 50 users, its monthly roll-up,
    and a reservation per GPU per day (what the report reads); the number of hourly rows."""
    store = Store(url).open()
    sqlite = store.db.dialect == "sqlite"

    def stamp(instant: datetime) -> Any:  # how UTCDateTime stores an instant
        return instant.isoformat(sep=" ", timespec="microseconds") if sqlite else instant

    gpu_ids = [g.id for g in store.inventory.gpus()][:gpus]
    rng = random.Random(16)
    start = datetime(year, 1, 1, tzinfo=UTC)
    days = (datetime(year + 1, 1, 1, tzinfo=UTC) - start).days
    hours = [start + timedelta(hours=h) for h in range(days * 24)]
    stamps = [stamp(h) for h in hours]
    months = [stamp(h.replace(day=1, hour=0)) for h in hours]
    with store.db.read() as conn:
        host_of = dict(conn.execute(text("SELECT id, host_id FROM gpus")).all())
    hourly: list[tuple[Any, ...]] = []
    monthly: dict[tuple[Any, ...], list[float]] = {}
    booked: list[tuple[Any, ...]] = []
    links: list[tuple[Any, ...]] = []
    next_id = 10_000_000
    keys = ("gpu_id", "hour", "payer", "kind", *FIGURES)
    written = 0
    conn = store.db.writer.connect()
    transaction = conn.begin()
    for gid in gpu_ids:
        if len(hourly) >= 200_000:
            _bulk(conn, "gpu_charges_hourly", keys, hourly)
            written += len(hourly)
            hourly.clear()
        for day in range(days):
            owner = f"user{rng.randrange(CLIENTS)}"
            first = rng.randrange(0, 12)
            next_id += 1
            a, b = hours[day * 24 + first], hours[day * 24 + first] + timedelta(hours=8)
            booked.append((next_id, owner, "year", "", stamp(a), stamp(b), stamp(a), False))
            links.append((next_id, gid, gid, stamp(a), stamp(b), False))
            for h in range(day * 24, day * 24 + 24):
                if first <= h - day * 24 < first + 8:
                    payer, kind, used = owner, "reserved", 1800.0 + (h * 7919 % 1800)
                elif h % 5 == 0:
                    payer, kind, used = f"user{(h + gid) % CLIENTS}", "queued", 3600.0
                else:
                    payer, kind, used = "", "idle", 0.0
                figures = (3600.0, used, used / 2, 3600.0 * (60 + 250 * used / 3600), 0.0)
                hourly.append((gid, stamps[h], payer, kind, *figures))
                into = monthly.setdefault((gid, months[h], payer, kind), [0.0] * 5)
                for j, value in enumerate(figures):
                    into[j] += value
    written += len(hourly)
    with conn:
        _bulk(conn, "gpu_charges_hourly", keys, hourly)
        _bulk(conn, "gpu_charges_monthly", ("gpu_id", "month", "payer", "kind", *FIGURES),
              [(*k, *v) for k, v in monthly.items()])  # fmt: skip
        for table, column, key in (
            ("payer_charges_monthly", "payer", lambda k: k[2]),
            ("host_charges_monthly", "host_id", lambda k: host_of[k[0]]),
        ):
            rolled: dict[tuple[Any, ...], list[float]] = {}
            for k, v in monthly.items():
                into = rolled.setdefault((k[1], key(k), k[3]), [0.0] * 5)
                for j, value in enumerate(v):
                    into[j] += value
            _bulk(conn, table, ("month", column, "kind", *FIGURES),
                  [(*k, *v) for k, v in rolled.items()])  # fmt: skip
        _bulk(conn, "reservations", ("id", "owner", "title", "description", "start_at",
                                     "end_at", "created_at", "flagged"), booked)  # fmt: skip
        _bulk(conn, "reservation_gpus", ("reservation_id", "gpu_id", "device_id", "start_at",
                                         "end_at", "cancelled"), links)  # fmt: skip
        transaction.commit()
    store.close()
    return written


def run_backend(
    name: str, url: str, count: int, n: int, year: bool, year_gpus: int | None = None
) -> dict[str, Any]:
    t0 = time.perf_counter()
    seeded = seed(url, count)
    print(f"[{name}] seeded {seeded} reservations in {time.perf_counter() - t0:.1f}s", flush=True)
    hourly = 0
    if year:
        t0 = time.perf_counter()
        hourly = seed_year(url, NOW.year - 1, year_gpus)
        print(f"[{name}] seeded {hourly} hourly charges in {time.perf_counter() - t0:.1f}s",
              flush=True)  # fmt: skip
    config = {"db_url": url, "hosts": HOST_SPECS, "booking_horizon": "400d",
              "max_reservation": "7d", "site_timezone": "UTC", "admin_groups": ["admins"],
              "monitor": False}  # fmt: skip
    servers = [JupyterServer(config, ALL_USERS), JupyterServer(config, ALL_USERS)]
    figures: dict[str, Any] = {"existing_reservations": seeded, "hourly_charges": hourly}
    try:
        port = servers[0].port
        with Steal() as steal_alone:
            figures["create_ms_no_limits"] = summary_ms(creates(port, n, NOW + timedelta(days=200)))
        t0 = time.perf_counter()
        set_limits(port)
        figures["set_limits_s"] = round(time.perf_counter() - t0, 2)
        with Steal() as steal:
            figures["create_ms"] = summary_ms(creates(port, n, NOW + timedelta(days=210)))
        figures["cpu_steal_pct"] = {"no_limits": steal_alone.pct, "limits": steal.pct}
        print(f"[{name}] creates: {json.dumps(figures)}", flush=True)
        figures["race"] = race([s.port for s in servers], url)
        print(f"[{name}] race: {json.dumps(figures['race'])}", flush=True)
        if year:
            admin = Client(port, "tok-admin")
            query = f"reports/accounting?month={NOW.year - 1}-01&until={NOW.year - 1}-12"
            times = []
            for _ in range(6):
                status, body, elapsed = admin.call("GET", query)
                assert status == 200, body
                assert body["check"]["users_add_up"], body["check"]
                times.append(elapsed)
            figures["report_year_first_ms"] = round(times[0] * 1000, 2)
            figures["report_year_ms"] = summary_ms(times[1:])
            figures["report_rows"] = len(body["rows"])
            print(f"[{name}] report of a year: {json.dumps(figures['report_year_ms'])}",
                  flush=True)  # fmt: skip
    finally:
        for s in servers:
            s.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k reservations, 200 creates")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny: 1,000 reservations, 30 creates, a year of 2 GPUs")  # fmt: skip
    args = parser.parse_args()
    count, n = (10_000, 200) if args.quick else (100_000, 1000)
    year_gpus = 2 if args.smoke else None
    if args.smoke:
        count, n = 1000, 30  # the first 10 creates warm the caches
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.sqlite'}"
        results["sqlite"] = run_backend("sqlite", url, count, n, year=True, year_gpus=year_gpus)
    with running_postgres() as cluster:
        results["postgresql"] = run_backend("postgresql", cluster.new_database(), count, n,
                                            year=args.smoke or not args.quick,
                                            year_gpus=year_gpus)  # fmt: skip
    s, p = results["sqlite"], results["postgresql"]
    final = {
        "existing_reservations": s["existing_reservations"],
        "gpus": HOSTS * GPUS_PER_HOST,
        "create_p50_ms": s["create_ms"]["p50"],
        "create_p99_ms": s["create_ms"]["p99"],
        "create_p50_ms_no_limits": s["create_ms_no_limits"]["p50"],
        "create_p99_ms_no_limits": s["create_ms_no_limits"]["p99"],
        "pg_create_p99_ms": p["create_ms"]["p99"],
        "pg_create_p99_ms_no_limits": p["create_ms_no_limits"]["p99"],
        "race_clients": CLIENTS,
        "race_won": s["race"]["won"] + p["race"]["won"],
        "race_refused_naming_the_limit": s["race"]["refused_naming_the_limit"]
        + p["race"]["refused_naming_the_limit"],
        "race_other": s["race"]["other"] + p["race"]["other"],
        "limit_overruns": s["race"]["overruns"] + p["race"]["overruns"],
        "limit_overruns_sqlite": s["race"]["overruns"],
        "limit_overruns_postgresql": p["race"]["overruns"],
        "report_year_ms": s["report_year_ms"]["p50"],
        "report_year_first_ms": s["report_year_first_ms"],
        "report_year_hourly_rows": s["hourly_charges"],
        "pg_report_year_ms": p.get("report_year_ms", {}).get("p50"),
        # 52 PUTs of limits, each re-flagging every live reservation
        "set_limits_s": s["set_limits_s"],
        "cpu_steal_pct_creates": s["cpu_steal_pct"],
        "quick": args.quick,
    }
    print(json.dumps(final))


if __name__ == "__main__":
    main()
