"""GET prometheus scraped by a real Prometheus: the series land, PromQL finds them; never open."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost
from tests.conftest import TOKENS, USERS
from tests.support import prometheus
from tests.support.server import Client, JupyterServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="needs Debian's prometheus")

SCRAPE_TOKEN = "scrape-token-for-the-tests-0123456789"
PATH = "/gpuhive/api/prometheus"
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


def _config(tmp: Path, sim: LocalSimHost, token: str) -> dict[str, Any]:
    env = sim.env()
    return {
        "db_url": f"sqlite:///{tmp / 'hive.sqlite'}",
        "hosts": [{"name": sim.name, "transport": "local",
                   "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.5,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
        "metrics_token": token,
    }  # fmt: skip


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JupyterServer]:
    sim = LocalSimHost("gpu1", tmp_path / "sim")
    srv = JupyterServer(_config(tmp_path, sim, SCRAPE_TOKEN), USERS)
    yield srv
    srv.stop()


def scrape(port: int, authorization: str | None) -> tuple[int, str, str]:
    """GET prometheus with this Authorization header (None: none): status, type, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": authorization} if authorization else {}
    conn.request("GET", PATH, headers=headers)
    reply = conn.getresponse()
    return reply.status, reply.getheader("Content-Type") or "", reply.read().decode()


def test_real_prometheus_scrapes_with_the_token_and_promql_finds_the_series(server):
    alice = Client(server.port, TOKENS["alice"])
    wait_for(lambda: _gpus(alice) == 4, 60, "discovery of gpu1's 4 simulated GPUs")
    start = datetime.now(UTC) + timedelta(seconds=5)
    status, booked, _ = alice.call(
        "POST", "reservations",
        {"title": "scraped", "gpus": ["gpu1:1"], "start": start.isoformat(),
         "end": (start + timedelta(hours=1)).isoformat()},
    )  # fmt: skip
    assert status == 201, booked
    jobs = [
        {"job_name": "gpuhive", "metrics_path": PATH,
         "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
         "authorization": {"type": "Bearer", "credentials": SCRAPE_TOKEN}},
        {"job_name": "anonymous", "metrics_path": PATH,
         "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]},
    ]  # fmt: skip
    prom = prometheus.Prometheus(jobs)
    try:
        memory = wait_for(
            lambda: prom.query('gpuhive_gpu_memory_total_bytes{host="gpu1"}'), 60,
            "Prometheus to hold gpu1's GPU memory series",
        )  # fmt: skip
        assert {s["metric"]["gpu"] for s in memory} == {f"gpu1:{i}" for i in range(4)}
        assert {float(s["value"][1]) for s in memory} == {40960 * 1024 * 1024}
        assert all(s["metric"]["uuid"].startswith("GPU-") for s in memory)
        assert {s["metric"]["model"] for s in memory} == {"NVIDIA A100-SXM4-40GB"}
        up = prom.query('gpuhive_host_up{host="gpu1"}')
        assert [float(s["value"][1]) for s in up] == [1.0]
        assert prom.query('gpuhive_host_probe_seconds{host="gpu1"}')
        healthy = prom.query('sum(gpuhive_gpu_health{host="gpu1",state="ok"})')
        assert float(healthy[0]["value"][1]) == 4.0

        def upcoming() -> list[dict[str, Any]]:
            return prom.query('gpuhive_reservations{user="alice",state="upcoming"}') or prom.query(
                'gpuhive_reservations{user="alice",state="active"}'
            )

        assert float(wait_for(upcoming, 30)[0]["value"][1]) == 1.0
        held = wait_for(
            lambda: prom.query('gpuhive_gpu_reservation_info{user="alice"}'), 30,
            "the reservation to become active and held",
        )  # fmt: skip
        assert [s["metric"]["gpu"] for s in held] == ["gpu1:1"]
        assert held[0]["metric"]["reservation"] == str(booked["id"])
        assert wait_for(lambda: prom.query("gpuhive_sweep_duration_seconds_count > 0"), 30)
        api = prom.query('gpuhive_api_request_duration_seconds_count{route="/reservations"}')
        assert {s["metric"]["method"] for s in api} >= {"POST"}
        # The job without the token is refused: Prometheus marks its target down.
        anonymous = wait_for(
            lambda: [t for t in prom.targets()
                     if t["labels"]["job"] == "anonymous" and t["health"] == "down"], 30,
        )  # fmt: skip
        assert "401" in anonymous[0]["lastError"]
        assert [float(s["value"][1]) for s in prom.query('up{job="anonymous"}')] == [0.0]
        assert [float(s["value"][1]) for s in prom.query('up{job="gpuhive"}')] == [1.0]
    finally:
        prom.stop()


def test_scrape_refused_without_the_token_and_allowed_for_admins(server):
    status, media, body = scrape(server.port, None)
    assert status == 401 and "metrics_token" in json.loads(body)["message"]
    status, _, body = scrape(server.port, "Bearer not-the-token")
    assert status == 401 and "Bearer" in json.loads(body)["message"]
    status, _, body = scrape(server.port, f"token {TOKENS['alice']}")
    assert status == 403 and "alice is not a gpuhive admin" in json.loads(body)["message"]
    status, media, body = scrape(server.port, f"token {TOKENS['boss']}")
    assert status == 200 and media.startswith("text/plain") and "gpuhive_host_up" in body
    status, media, body = scrape(server.port, f"Bearer {SCRAPE_TOKEN}")
    assert status == 200 and "# TYPE gpuhive_gpu_health gauge" in body
    # Every metric the example Grafana dashboard queries is exposed.
    dashboard = (Path(__file__).parents[2] / "examples" / "grafana-gpuhive.json").read_text()
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"gpuhive_\w+", dashboard)}
    assert used and all(f"# TYPE {name} " in body for name in used), used


def test_no_token_configured_is_403_saying_how(tmp_path):
    sim = LocalSimHost("gpu1", tmp_path / "sim")
    srv = JupyterServer(_config(tmp_path, sim, ""), USERS)
    try:
        status, _, body = scrape(srv.port, None)
        assert status == 403
        assert "c.GpuHiveApp.metrics_token" in json.loads(body)["message"]
        status, _, body = scrape(srv.port, "Bearer anything")
        assert status == 403 and "c.GpuHiveApp.metrics_token" in json.loads(body)["message"]
        status, _, _ = scrape(srv.port, f"token {TOKENS['boss']}")
        assert status == 200
    finally:
        srv.stop()


def _gpus(client: Client) -> int:
    status, body, _ = client.call("GET", "hosts")
    return sum(len(h["gpus"]) for h in body["hosts"]) if status == 200 else 0
