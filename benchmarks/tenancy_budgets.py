"""The budget figures of benchmarks/tenancy.py (see its docstring): the 50-client race for a
group's last GPU-hours on SQLite and PostgreSQL, and booking p99 with budgets and host groups
over without."""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any

from tests.support.postgres import running_postgres
from tests.support.server import Client, JupyterServer

CLIENTS = 50
BUDGET_HOURS = 10
MEMBERS = 5
GPUS = [f"b{h}:{i}" for h in range(4) for i in range(8)]


def _site(url: str, *, grouped: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    hosts = [
        {"name": f"b{h}", "address": "127.0.0.1", "transport": "local", "gpu_count": 8,
         **({"group": "lab"} if grouped else {})}
        for h in range(4)
    ]  # fmt: skip
    config: dict[str, Any] = {
        "db_url": url, "hosts": hosts, "monitor": False, "admin_groups": ["admins"],
        "site_timezone": "UTC", "booking_horizon": "60d",
    }  # fmt: skip
    if grouped:
        config["host_groups"] = {"lab": {"admin_groups": ["lab-heads"]}}
    users = {f"tok-m{i}": {"name": f"m{i}", "groups": ["lab"]} for i in range(MEMBERS)}
    users["tok-boss"] = {"name": "boss", "groups": ["admins"]}
    return config, users


def _budget(port: int, scope: str, name: str, hours: float) -> int:
    today = datetime.now(UTC).date()
    status, body, _ = Client(port, "tok-boss").call("POST", "budgets", {
        "scope": scope, "name": name, "gpu_hours": hours, "period": "dates",
        "starts": str(today - timedelta(days=1)), "ends": str(today + timedelta(days=50)),
    })  # fmt: skip
    assert status == 201, (status, body)
    return int(body["id"])


def _booking(i: int, start: datetime) -> dict[str, Any]:
    at = start + (i // len(GPUS)) * timedelta(hours=2)
    return {"title": f"r{i}", "gpus": [GPUS[i % len(GPUS)]], "start": at.isoformat(),
            "duration": "1h"}  # fmt: skip


def _start() -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)


def race(url: str) -> dict[str, float]:
    """50 threads of the group's members race for its last 10 GPU-hours: won, overrun."""
    config, users = _site(url, grouped=True)
    server = JupyterServer(config, users)
    try:
        budget = _budget(server.port, "group", "lab", BUDGET_HOURS)
        for m in range(MEMBERS):  # gpuhive learns their groups
            assert Client(server.port, f"tok-m{m}").call("GET", "me")[0] == 200
        start, gate = _start(), threading.Barrier(CLIENTS)

        def one(i: int) -> int:
            client = Client(server.port, f"tok-m{i % MEMBERS}")
            gate.wait()
            status, body, _ = client.call("POST", "reservations", _booking(i, start))
            assert status in (201, 409), (status, body)
            return status

        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = list(pool.map(one, range(CLIENTS)))
        status, body, _ = Client(server.port, "tok-boss").call("GET", f"budgets/{budget}")
        assert status == 200, (status, body)
        committed = body["standing"]["gpu_hours"]["committed"]
        won = statuses.count(201)
        overrun = max(0.0, won - BUDGET_HOURS, committed - BUDGET_HOURS)
        return {"won": won, "overrun": round(overrun, 6)}
    finally:
        server.stop()


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def latency(bookings: int) -> dict[str, Any]:
    """Bookings in turns on a plain server and one with host groups and budgets."""
    folder = Path(tempfile.mkdtemp(prefix="gpuhive-budgets-"))
    servers = []
    try:
        for grouped in (False, True):
            config, users = _site(f"sqlite:///{folder / f'{grouped}.sqlite'}", grouped=grouped)
            servers.append(JupyterServer(config, users))
        _budget(servers[1].port, "group", "lab", 1e6)
        _budget(servers[1].port, "user", "m0", 1e6)
        clients = [Client(s.port, "tok-m0") for s in servers]
        start, times = _start(), ([], [])  # type: tuple[datetime, tuple[list[float], list[float]]]
        for i in range(bookings + 10):  # the first 10 of each warm up
            turn = list(enumerate(clients))
            for n, client in turn if i % 2 else turn[::-1]:  # who goes first alternates
                status, body, took = client.call("POST", "reservations", _booking(i, start))
                assert status == 201, (status, body)
                if i >= 10:
                    times[n].append(took)
        plain, budgeted = p99(times[0]), p99(times[1])
        return {
            "create_p99_ratio_with_budgets": round(budgeted / plain, 3),
            "create_p99_ms": {
                "plain": round(plain * 1000, 2),
                "budgets": round(budgeted * 1000, 2),
            },
            "create_p50_ms": {
                "plain": round(median(times[0]) * 1000, 2),
                "budgets": round(median(times[1]) * 1000, 2),
            },
            "budget_bookings": bookings,
        }
    finally:
        for server in servers:
            server.stop()


def budget_figures(bookings: int) -> dict[str, Any]:
    """The race on SQLite and PostgreSQL, then the latency ratio."""
    folder = Path(tempfile.mkdtemp(prefix="gpuhive-budget-race-"))
    by_db = {"sqlite": race(f"sqlite:///{folder / 'race.sqlite'}")}
    with running_postgres() as cluster:
        by_db["postgresql"] = race(cluster.new_database())
    return {
        "budget_overruns": sum(r["overrun"] for r in by_db.values()),
        "budget_overruns_by_db": by_db,
        **latency(bookings),
    }
