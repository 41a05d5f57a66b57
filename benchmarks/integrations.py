"""Integrations benchmark: an iCal feed of 1,000 reservations; webhook delivery delay at
100 events/s to a healthy receiver while another endpoint hangs; the reservation API meanwhile.

Run: `.venv/bin/python benchmarks/integrations.py [--quick | --smoke]` (`--smoke`: a feed of
40, 1 s of events). A real Jupyter server with
gpuhive runs in its own process (SQLite, 8 hosts × 4 GPUs declared, no monitoring). The
receivers are real HTTP servers on 127.0.0.1 in this process: the healthy one answers 200 at
once, the hanging one never answers (the server gives up after webhook_timeout). Each event is
a booking; its delay is from sending the booking to the receiver getting the signed event.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.machine import Steal
from tests.support.server import Client, JupyterServer, percentile

USERS = {
    "tok-bench": {"name": "bench"},
    "tok-feeder": {"name": "feeder"},
    "tok-boss": {"name": "boss"},
}
LANES = 4  # client threads sending the events
HOSTS = [{"name": f"node{i}", "gpu_count": 4} for i in range(8)]


def ms(values: list[float], pct: float | None = None) -> float:
    value = statistics.median(values) if pct is None else percentile(values, pct)
    return round(value * 1000, 2)


class Arrivals:
    """What the healthy receiver got: reservation id → arrival (monotonic)."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self.lock = threading.Lock()


def receiver(arrivals: Arrivals | None) -> ThreadingHTTPServer:
    """A receiver on 127.0.0.1: records arrivals, or (None) hangs on every request."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if arrivals is None:
                time.sleep(3600)  # never answers; the sender's timeout ends the attempt
                return
            now = time.monotonic()
            event = json.loads(body)
            rid = event["data"]["reservation"]["id"]
            with arrivals.lock:
                arrivals.at.setdefault(rid, now)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def feed_figures(port: int, count: int, base: datetime) -> dict[str, float]:
    """Book `count` reservations for one user, then time GETs of their feed."""
    feeder = Client(port, "tok-feeder")
    posts = []
    for i in range(count):
        start = base + timedelta(hours=i // 32)
        body = {"title": f"run {i}, part; {i % 7}", "gpus": [f"node{(i % 32) // 4}:{i % 4}"],
                "start": start.isoformat(), "duration": "50m"}  # fmt: skip
        status, reply, took = feeder.call("POST", "reservations", body)
        assert status == 201, reply
        posts.append(took)
    status, made, _ = feeder.call("POST", "feeds/personal")
    assert status == 201, made
    url = made["url"]
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as reply:  # 127.0.0.1
            text = reply.read()
        times.append(time.perf_counter() - t0)
    assert text.count(b"BEGIN:VEVENT") == count, text[:200]
    return {"ical_feed_first_ms": round(times[0] * 1000, 2), "ical_feed_ms": ms(times[1:]),
            "ical_feed_p95_ms": ms(times[1:], 95),
            "api_p50_ms_without_webhooks": ms(posts), "api_p99_ms_without_webhooks": ms(posts, 99)}  # fmt: skip


def receivers(conn: Connection) -> None:
    """In its own process (so that its threads do not slow the clients): both receivers;
    sends their ports, then on request the arrivals (CLOCK_MONOTONIC is system-wide)."""
    arrivals = Arrivals()
    healthy, hanging = receiver(arrivals), receiver(None)
    conn.send((healthy.server_address[1], hanging.server_address[1]))
    conn.recv()
    with arrivals.lock:
        conn.send(dict(arrivals.at))


def paced_load(
    port: int, seconds: float, rate: float, base: datetime
) -> tuple[dict[int, float], list[float], float]:
    """Bookings at `rate` per second from LANES clients: send times, API latencies, duration."""
    sent: dict[int, float] = {}
    api: list[float] = []
    total = int(seconds * rate)
    began = time.monotonic()

    def send(lane: int) -> None:
        """Every LANES-th booking, each at its due time (several clients keep the pace)."""
        client = Client(port, "tok-bench")
        for i in range(lane, total, LANES):
            pause = began + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            start = base + timedelta(hours=i // 32)
            body = {"title": f"event {i}", "gpus": [f"node{(i % 32) // 4}:{i % 4}"],
                    "start": start.isoformat(), "duration": "50m"}  # fmt: skip
            t0 = time.monotonic()
            status, made, took = client.call("POST", "reservations", body)
            assert status == 201, made
            sent[made["id"]] = t0
            api.append(took)
            if i % 10 == 0:
                status, _, took = client.call("GET", f"reservations/{made['id']}")
                api.append(took)

    lanes = [threading.Thread(target=send, args=(lane,)) for lane in range(LANES)]
    for thread in lanes:
        thread.start()
    for thread in lanes:
        thread.join()
    return sent, api, time.monotonic() - began


def webhook_figures(port: int, seconds: float, rate: float, base: datetime) -> dict[str, Any]:
    # the same load first without any endpoint: what the API costs at this pace anyway
    with Steal() as steal_alone:
        _, alone, _ = paced_load(port, seconds, rate, base + timedelta(days=60))
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=receivers, args=(theirs,))
    process.start()
    healthy_port, hanging_port = ours.recv()
    bench, boss = Client(port, "tok-bench"), Client(port, "tok-boss")
    for client, target, extra in (
        (bench, healthy_port, {}),
        (boss, hanging_port, {"site": True}),
    ):
        url = f"http://127.0.0.1:{target}/hook"
        status, made, _ = client.call("POST", "webhooks", {"url": url, **extra})
        assert status == 201, made
    with Steal() as steal:
        sent, api, elapsed = paced_load(port, seconds, rate, base + timedelta(days=120))
    time.sleep(max(2.0, 0.1 * seconds))  # the last deliveries arrive
    ours.send("done")
    arrived: dict[int, float] = ours.recv()
    process.kill()
    delays = [arrived[rid] - t0 for rid, t0 in sent.items() if rid in arrived]
    return {
        "events": len(sent),
        "events_per_s": round(len(sent) / elapsed, 1),
        "delivered": len(delays),
        "webhook_delay_p50_ms": ms(delays),
        "webhook_delay_p99_ms": ms(delays, 99),
        "api_p50_ms_same_pace_no_webhooks": ms(alone),
        "api_p99_ms_same_pace_no_webhooks": ms(alone, 99),
        "api_p50_ms_during_webhooks": ms(api),
        "api_p99_ms_during_webhooks": ms(api, 99),
        # the hypervisor's share of the CPU in each phase (fixtures/machine.py): the tails
        # are only comparable between runs where it is near 0
        "cpu_steal_pct_same_pace_no_webhooks": steal_alone.pct,
        "cpu_steal_pct_during_webhooks": steal.pct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s of events instead of 30 s")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuhive-integrations-"))
    config = {
        "db_url": f"sqlite:///{root / 'hive.sqlite'}",
        "hosts": HOSTS,
        "monitor": False,
        "booking_horizon": "400d",
        "admin_users": ["boss"],
        "webhook_timeout": 5.0,
        "webhook_allow_private": True,  # the receivers listen on 127.0.0.1
        "feed_ahead": "400d",
    }
    server = JupyterServer(config, USERS)
    base = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    base += timedelta(days=1)
    try:
        result: dict[str, Any] = feed_figures(server.port, 40 if args.smoke else 1000, base)
        seconds = 1.0 if args.smoke else 5.0 if args.quick else 30.0
        result |= webhook_figures(server.port, seconds, 100.0, base)
    finally:
        server.stop()
    result["quick"] = args.quick
    print(json.dumps(result))


if __name__ == "__main__":
    main()
