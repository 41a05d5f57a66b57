"""Shares of a GPU (issue #44): sessions served, the booking race, create latency, over-share.

Run: `.venv/bin/python benchmarks/shares.py [--quick | --smoke]` (`--smoke`: tiny sizes).
The last line printed is one JSON object with the figures:

- `sessions_served_ratio`: notebook sessions served at once on the same cards with shares
  against whole GPUs. A notebook-like workload (3 in 4 sessions need at most a quarter of an
  80 GiB card: 4 to 20 GiB; 3 in 20 need 40 GiB; 1 in 10 a whole card) asks, in random order,
  for 4 h from the same instant on hosts of four shareable 80 GiB GPUs. Every session is
  booked through the real store (Reservations.create, its transaction, its database rules):
  whole GPUs the first time, its memory as a share the second (each session tries the GPUs
  fullest first, as the finder ranks them, and takes the first the store accepts). Served:
  the bookings read back from the database live at that instant.
- `overcommit_instants`: instants at which the shares booked on a GPU add up to more than
  one GPU, after a race of 50 clients on SQLite and on PostgreSQL (each: 50 HTTP clients
  through two real server processes on one database, all at once, for overlapping shares of
  two GPUs; then 50 threads through the store with the application's pre-check switched off,
  so that only the database refuses). Counted from the rows read back: at every row's start,
  the sum of the live shares on its GPU.
- `share_create_p99_ratio`: p99 of creating a share booking over that of a whole-GPU
  booking, through the REST API of the same server, interleaved, in the same run (SQLite; the
  PostgreSQL ratio is `pg_share_create_p99_ratio`).
- `over_share_detected_s`: from a share holder's process growing past the share to the
  violation (benchmarks/shares_enforce.py `over_share_detected`, at this benchmark's size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, distinct, func, select, text

from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.model.shares import WHOLE, share_of_memory
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import reservation_gpus
from tests.support.postgres import running_postgres
from tests.support.server import Client, JupyterServer, summary_ms

UTC = timezone.utc
GPU_MIB = 81920
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
CLIENTS = 50
USERS = {f"tok-user{i}": {"name": f"user{i}", "groups": ["lab"]} for i in range(CLIENTS)}
LIVE_ROWS = text(
    "SELECT device_id, start_at, end_at, share_ppm FROM reservation_gpus WHERE NOT cancelled"
)


def host_specs(hosts: int) -> list[dict[str, Any]]:
    """`hosts` hosts of four shareable 80 GiB GPUs."""
    return [
        {"name": f"node{h:02d}", "shareable": True,
         "gpus": [{"model": "H100 80GB", "memory_mib": GPU_MIB} for _ in range(4)]}
        for h in range(hosts)
    ]  # fmt: skip


def notebook_demand(rng: random.Random) -> int:
    """MiB a notebook session needs: 3 in 4 at most a quarter card, 3 in 20 half, 1 in 10 all."""
    roll = rng.random()
    if roll < 0.75:
        return rng.choice([4, 8, 12, 16, 20]) * 1024
    return 40 * 1024 if roll < 0.90 else GPU_MIB


# --- sessions served at once ------------------------------------------------------------


def served(url: str, hosts: int, sessions: int, shared: bool) -> int:
    """Sessions booked for 4 h from one instant (whole GPUs, or shares), read back."""
    store = Store(url).open()
    try:
        store.inventory.sync(parse_hosts(host_specs(hosts)))
        gpus = store.inventory.gpus()
        rng = random.Random(44)
        start = NOW + timedelta(days=2)
        load = {g.id: 0 for g in gpus}
        for i in range(sessions):
            need = share_of_memory(notebook_demand(rng), GPU_MIB) if shared else WHOLE
            for gpu in sorted(gpus, key=lambda g: (-load[g.id], g.id)):  # fullest first
                if load[gpu.id] + need > WHOLE:
                    continue
                try:
                    store.reservations.create(
                        f"user{i % CLIENTS}", f"notebook {i}", "", start,
                        start + timedelta(hours=4), [gpu.id], share=need,
                    )  # fmt: skip
                except Conflict:
                    continue
                load[gpu.id] += need
                break
        at = start + timedelta(hours=1)
        rg = reservation_gpus
        live = select(func.count(distinct(rg.c.reservation_id))).where(
            rg.c.cancelled.is_(False), rg.c.start_at <= at, rg.c.end_at > at
        )
        with store.db.read() as conn:
            return int(conn.execute(live).scalar() or 0)
    finally:
        store.close()


# --- the race -----------------------------------------------------------------------------


def overcommitted(url: str) -> int:
    """Instants (each row's start) at which a GPU's live shares add up to more than one."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = [tuple(r) for r in conn.execute(LIVE_ROWS).all()]
    finally:
        engine.dispose()
    by_gpu: dict[int, list[tuple[Any, Any, int]]] = {}
    for device, start, end, share in rows:
        by_gpu.setdefault(device, []).append((start, end, share))
    over = 0
    for spans in by_gpu.values():
        for at in {a for a, _, _ in spans}:
            over += sum(s for a, b, s in spans if a <= at < b) > WHOLE
    return over


def race_bodies(rng: random.Random, clients: int, base: datetime) -> list[dict[str, Any]]:
    """Overlapping shares (and a few whole GPUs) of node00:0 and node00:1."""
    bodies = []
    for i in range(clients):
        start = base + timedelta(minutes=30 * rng.randint(0, 6))
        body: dict[str, Any] = {
            "title": f"race {i}",
            "gpus": [f"node00:{rng.randint(0, 1)}"],
            "start": start.isoformat(),
            "duration": f"{rng.randint(1, 3)}h",
        }
        kind = rng.random()
        if kind < 0.45:
            body["share"] = rng.choice([0.1, 0.25, 0.3, 0.5])
        elif kind < 0.9:
            body["memory"] = f"{rng.choice([8, 16, 20, 32, 40])}G"
        bodies.append(body)  # else: a whole GPU
    return bodies


def api_race(ports: list[int], clients: int) -> dict[str, Any]:
    """`clients` HTTP clients at once, spread over the servers."""
    bodies = race_bodies(random.Random(11), clients, NOW + timedelta(days=250))
    conns = [Client(ports[i % len(ports)], f"tok-user{i}") for i in range(clients)]
    for c in conns:
        c.call("GET", "me")  # connected and authenticated before the start line
    barrier = threading.Barrier(clients)
    statuses = [0] * clients

    def run(i: int) -> None:
        barrier.wait()
        statuses[i] = conns[i].call("POST", "reservations", bodies[i])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"won": statuses.count(201), "refused_409": statuses.count(409),
            "other": clients - statuses.count(201) - statuses.count(409)}  # fmt: skip


def store_race(url: str, clients: int) -> dict[str, Any]:
    """`clients` threads booking shares through the store with the pre-check off: only the
    database's rule stands between them."""
    store = Store(url).open()
    store.reservations.clashes = lambda *args, **kwargs: []  # type: ignore[method-assign]
    try:
        gpus = [store.inventory.gpu(f"node00:{i}") for i in (2, 3)]
        rng = random.Random(12)
        base = NOW + timedelta(days=260)
        plans = [
            (rng.choice(gpus), base + timedelta(minutes=30 * rng.randint(0, 6)),
             rng.randint(1, 3), rng.choice([WHOLE // 10, WHOLE // 4, 300_000, WHOLE // 2, WHOLE]))
            for _ in range(clients)
        ]  # fmt: skip
        barrier = threading.Barrier(clients)
        outcome = [""] * clients

        def run(i: int) -> None:
            gpu, start, hours, share = plans[i]
            assert gpu is not None
            barrier.wait()
            try:
                store.reservations.create(
                    f"user{i}",
                    "raw",
                    "",
                    start,
                    start + timedelta(hours=hours),
                    [gpu.id],
                    share=share,
                )
                outcome[i] = "won"
            except Conflict:
                outcome[i] = "refused"
            except Exception as error:  # counted: anything else is a failure
                outcome[i] = type(error).__name__

        threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        store.close()
    return {"won": outcome.count("won"), "refused": outcome.count("refused"),
            "other": clients - outcome.count("won") - outcome.count("refused")}  # fmt: skip


# --- create latency -----------------------------------------------------------------------


def create_latency(port: int, creates: int, hosts: int) -> dict[str, Any]:
    """Share and whole-GPU creates through the API, interleaved, none in another's way."""
    client = Client(port, "tok-user0")
    base = NOW + timedelta(days=100)
    times: dict[str, list[float]] = {"share": [], "whole": []}
    failures = 0
    slots = hosts * 4
    for i in range(2 * creates):
        kind = "share" if i % 2 else "whole"
        gpu = f"node{(i % slots) // 4:02d}:{i % 4}"
        start = base + timedelta(hours=2 * (i // slots))
        body: dict[str, Any] = {"title": f"bench {i}", "gpus": [gpu],
                                "start": start.isoformat(), "duration": "1h"}  # fmt: skip
        if kind == "share":
            body["memory"] = "20G"
        status, _, elapsed = client.call("POST", "reservations", body)
        failures += status != 201
        times[kind].append(elapsed)
    share_ms, whole_ms = summary_ms(times["share"]), summary_ms(times["whole"])
    return {"share_create_ms": share_ms, "whole_create_ms": whole_ms, "create_failures": failures,
            "share_create_p99_ratio": round(share_ms["p99"] / whole_ms["p99"], 3)}  # fmt: skip


def run_backend(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The race and the latencies on one database."""
    config = {"db_url": url, "hosts": host_specs(args.hosts), "booking_horizon": "400d",
              "max_reservation": "7d", "site_timezone": "UTC"}  # fmt: skip
    servers = [JupyterServer(config, USERS), JupyterServer(config, USERS)]
    try:
        figures = create_latency(servers[0].port, args.creates, args.hosts)
        print(f"[{name}] create: {json.dumps(figures)}", flush=True)
        figures["api_race"] = api_race([s.port for s in servers], args.clients)
        print(f"[{name}] api race: {json.dumps(figures['api_race'])}", flush=True)
    finally:
        for s in servers:
            s.stop()
    figures["store_race"] = store_race(url, args.clients)
    print(f"[{name}] store race, pre-check off: {json.dumps(figures['store_race'])}", flush=True)
    figures["overcommit_instants"] = overcommitted(url)
    return figures


# --- over-share (benchmarks/shares_enforce.py) ------------------------------------------------


def over_share(args: argparse.Namespace) -> dict[str, Any]:
    """`over_share_detected_s`: the shares-enforcement benchmark's figure, at this size."""
    from benchmarks.shares_enforce import over_share_detected

    trials = 2 if args.smoke else 4 if args.quick else 12
    with tempfile.TemporaryDirectory(prefix="gpuhive-bench-") as tmp:
        return asyncio.run(over_share_detected(1.0, 1, trials, Path(tmp)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sessions and creates")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: that it runs")
    args = parser.parse_args()
    args.hosts, args.sessions, args.creates, args.clients = (
        (1, 40, 10, 10) if args.smoke else (4, 200, 100, CLIENTS) if args.quick
        else (8, 400, 300, CLIENTS)
    )  # fmt: skip
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpuhive-shares-") as tmp:
        folder = Path(tmp)
        whole = served(f"sqlite:///{folder / 'whole.sqlite'}", args.hosts, args.sessions, False)
        shared = served(f"sqlite:///{folder / 'shared.sqlite'}", args.hosts, args.sessions, True)
        print(f"sessions served at once: {whole} on whole GPUs, {shared} with shares", flush=True)
        results["sqlite"] = run_backend("sqlite", f"sqlite:///{folder / 'race.sqlite'}", args)
    with running_postgres() as cluster:
        results["postgresql"] = run_backend("postgresql", cluster.new_database(), args)
    edge = over_share(args)
    print(f"over-share: {json.dumps(edge)}", flush=True)
    s, p = results["sqlite"], results["postgresql"]
    final = {
        "gpus": args.hosts * 4,
        "sessions": args.sessions,
        "sessions_served_whole": whole,
        "sessions_served_shares": shared,
        "sessions_served_ratio": round(shared / whole, 2) if whole else None,
        "race_clients": args.clients,
        "overcommit_instants": s["overcommit_instants"] + p["overcommit_instants"],
        "overcommit_instants_sqlite": s["overcommit_instants"],
        "overcommit_instants_postgresql": p["overcommit_instants"],
        "race_won": sum(r[k]["won"] for r in (s, p) for k in ("api_race", "store_race")),
        "race_other_status": sum(r[k]["other"] for r in (s, p) for k in ("api_race", "store_race")),
        "share_create_p99_ratio": s["share_create_p99_ratio"],
        "pg_share_create_p99_ratio": p["share_create_p99_ratio"],
        "share_create_p99_ms": s["share_create_ms"]["p99"],
        "whole_create_p99_ms": s["whole_create_ms"]["p99"],
        "create_failures": s["create_failures"] + p["create_failures"],
        # filled by benchmarks/shares_enforce.py's measurement (the shares-edge work)
        "over_share_detected_s": edge.get("over_share_detected_s"),
        "over_share_target_s": edge.get("over_share_target_s"),
        "quick": args.quick,
        "smoke": args.smoke,
    }
    print(json.dumps(final))


if __name__ == "__main__":
    main()
