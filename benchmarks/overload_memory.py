"""A replica's memory through an overload burst: with the bound on requests in flight, without.

Run: `.venv/bin/python benchmarks/overload_memory.py [--seconds 20] [--clients 400]
[--bursts 1] [--smoke]`.
A real JupyterHub and PostgreSQL (tests/support/team_hub.py), and service replicas beside
the Hub-managed one, each started the way tests/hub/conftest.py starts a second replica:
`bounded` (the defaults: max_requests_in_flight 64, request_deadline 20 s) and `unbounded`
(max_requests_in_flight 0). Each replica in turn gets a burst of --clients concurrent
clients (70 % GET reservations, 25 % POST reservations with an Idempotency-Key, 5 % GET
hosts; each client gives up after 10 s, as an impatient user does) for --seconds, then
rests for --rest seconds; before each replica's turn the store forgets the bookings of the
last (GET reservations costs more with every booking it returns). RSS (VmRSS of /proc/PID/status) is read before the burst, every
0.5 s during it (the peak) and after the rest. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jupyter_gpuhive.sim.ports import free_port  # noqa: E402
from tests.hub.conftest import start_replica  # noqa: E402
from tests.support.postgres import running_postgres  # noqa: E402
from tests.support.team_hub import TeamHub  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

USERS = {f"u{i:03d}": ["phd"] for i in range(40)}
GPUS = [f"gpu{h}:{g}" for h in (1, 2, 3) for g in range(4)]


def forget_bookings(db_url: str) -> None:
    """Each replica starts from the same store: no bookings of the previous burst (GET
    reservations costs more with every booking it returns)."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE reservations, idempotency_keys CASCADE")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for {pid}")


def children_rss_mib(pid: int) -> float:
    """The replica and the processes it started (the sweep's), together."""
    total = rss_mib(pid)
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        total += rss_mib(int(child))
    return round(total, 1)


async def one(port: int, prefix: str, token: str, rng: random.Random) -> str:
    """One request on a new connection: its outcome ('2xx', '409', '503', 'timeout', ...)."""
    roll = rng.random()
    headers = {"Authorization": f"token {token}", "Host": f"127.0.0.1:{port}"}
    body = b""
    if roll < 0.70:
        method, path = "GET", "api/reservations"
    elif roll < 0.95:
        start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        start += timedelta(days=1, hours=rng.randrange(24 * 20))
        body = json.dumps({"title": "burst", "gpus": [rng.choice(GPUS)],
                           "start": start.isoformat(), "duration": "1h"}).encode()  # fmt: skip
        method, path = "POST", "api/reservations"
        headers |= {"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())}
    else:
        method, path = "GET", "api/hosts"
    headers |= {"Content-Length": str(len(body)), "Connection": "close"}
    head = f"{method} {prefix}{path} HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()
    )
    writer = None
    try:
        async with asyncio.timeout(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head.encode() + b"\r\n" + body)
            status = (await reader.readline()).split()[1].decode()
            await reader.read()
    except TimeoutError:
        return "timeout"
    except (OSError, IndexError):
        return "error"
    finally:
        if writer is not None:
            writer.close()
    return "2xx" if status.startswith("2") else status


async def burst(port: int, prefix: str, tokens: list[str], clients: int, seconds: float,
                pid: int) -> dict[str, Any]:  # fmt: skip
    outcomes: dict[str, int] = {}
    peak = 0.0
    end = time.monotonic() + seconds

    async def client(i: int) -> None:
        rng = random.Random(i)
        while time.monotonic() < end:
            outcome = await one(port, prefix, tokens[i % len(tokens)], rng)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome == "503":
                await asyncio.sleep(1)  # Retry-After

    async def sample() -> None:
        nonlocal peak
        while time.monotonic() < end:
            peak = max(peak, children_rss_mib(pid))
            await asyncio.sleep(0.5)

    await asyncio.gather(sample(), *(client(i) for i in range(clients)))
    answered = outcomes.get("2xx", 0) + outcomes.get("409", 0)  # 409: the slot was taken
    return {"outcomes": outcomes, "peak_mib": peak,
            "goodput_per_s": round(outcomes.get("2xx", 0) / seconds, 1),
            "answered_per_s": round(answered / seconds, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=400)
    parser.add_argument("--rest", type=float, default=15)
    parser.add_argument("--bursts", type=int, default=1, help="bursts per replica, in a row")
    parser.add_argument("--smoke", action="store_true", help="3 s bursts of 30 clients")
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.clients, args.rest = 3.0, 30, 1.0
    results: dict[str, Any] = {"clients": args.clients, "seconds": args.seconds}
    with running_postgres() as postgres:
        hub = TeamHub(postgres.new_database(), USERS)
        hub.start()
        replicas: list[subprocess.Popen[bytes]] = []
        try:
            tokens = [hub.token_for(u, ["access:services!service=gpuhive"]) for u in USERS]
            for name, extra in (("bounded", ""), ("unbounded", "max_requests_in_flight = 0")):
                forget_bookings(hub.db_url)
                config = hub.dir / f"{name}.py"
                lines = [f"c.GpuHiveApp.{extra}"] if extra else []
                config.write_text(hub.service_config.read_text() + "\n".join(lines) + "\n")
                port = free_port()
                replica = start_replica(hub, port, config)
                replicas.append(replica)
                up = functools.partial(lambda p: hub.health(p).status == 200, port)
                wait_for(up, 60, f"{name} start", interval=0.2, ignore=(OSError,))
                asyncio.run(burst(port, hub.service_prefix, tokens, 20, 3, replica.pid))  # warm
                time.sleep(2)
                before = children_rss_mib(replica.pid)
                rounds = []
                for _ in range(args.bursts):
                    load = burst(port, hub.service_prefix, tokens, args.clients, args.seconds,
                                 replica.pid)  # fmt: skip
                    during = asyncio.run(load)
                    time.sleep(args.rest)
                    rounds.append({**during, "rss_after_mib": children_rss_mib(replica.pid)})
                results[name] = {"rss_before_mib": before, **rounds[-1],
                                 "rss_after_each_mib": [r["rss_after_mib"] for r in rounds],
                                 "peak_each_mib": [r["peak_mib"] for r in rounds]}  # fmt: skip
                print(name, results[name], flush=True)
                replica.kill()
                replica.wait(10)
        finally:
            for replica in replicas:
                if replica.poll() is None:
                    replica.kill()
            hub.cleanup()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
