"""DashboardModel/View against a server sweeping simulated local hosts with real processes."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.notebook.client import HiveClient
from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user, start_gpu_process
from jupyter_gpuhive.widgets.dashboard_model import DashboardModel
from jupyter_gpuhive.widgets.dashboard_view import DashboardView, process_table
from tests.conftest import TOKENS, USERS
from tests.support.server import JupyterServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as users")
UTC = timezone.utc
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture(scope="module")
def live_url() -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="gpuhive-dash-"))
    hosts = []
    for name in ("wdash1", "wdash2"):  # names no other test on this machine simulates
        env = LocalSimHost(name, root / name).env()
        hosts.append({"name": name, "transport": "local", "env": {k: env[k] for k in SIM_ENV}})
    config = {"db_url": f"sqlite:///{root / 'hive.sqlite'}", "hosts": hosts,
              "poll_interval": 0.3, "site_timezone": "UTC"}  # fmt: skip
    server = JupyterServer(config, USERS)
    yield f"http://127.0.0.1:{server.port}/"
    server.stop()


def test_process_table_marks_the_process_that_breaks_a_reservation(live_url: str) -> None:
    for user in ("gh-alice", "gh-bob"):
        ensure_user(user)
    alice = HiveClient(live_url, TOKENS["alice"])
    model = DashboardModel(alice, hosts=["wdash1"], unix_user=lambda name: f"gh-{name}")

    def sampled() -> bool:
        model.poll_state()
        return any(g["util"] is not None for h in model.state for g in h["gpus"])

    def three_processes() -> Any:
        rows = model.poll_state()
        return rows if {p.pid for p in procs[:3]} <= {r.pid for r in rows} else None

    wait_for(sampled, timeout=15)
    held = alice.reserve(title="mine", gpus=["wdash1:1"], start=datetime.now(UTC).isoformat(),
                         duration="1h")  # fmt: skip
    procs = [
        start_gpu_process("wdash1", [1], user="gh-alice", mem_mib=1024, util=50),
        start_gpu_process("wdash1", [1], user="gh-bob", mem_mib=2048, util=40),
        start_gpu_process("wdash1", [2], user="gh-bob", mem_mib=512, util=10),
        start_gpu_process("wdash2", [0], user="gh-bob", mem_mib=512, util=10),
    ]
    try:
        rows = wait_for(three_processes, timeout=15)
        by_pid = {r.pid: r for r in rows}
        assert set(by_pid) == {p.pid for p in procs[:3]}  # wdash2 is not on this dashboard
        own, intruder, unreserved = (by_pid[p.pid] for p in procs[:3])
        assert (own.gpu, own.user, own.holder, own.violation) == ("wdash1:1", "gh-alice", "alice",
                                                                  False)  # fmt: skip
        assert (intruder.user, intruder.holder, intruder.violation) == ("gh-bob", "alice", True)
        assert intruder.memory_mib == 2048 and "sleep" in intruder.command
        assert (unreserved.holder, unreserved.violation) == (None, False)
        html = process_table(model)
        assert html.count("background:#fdd") == 1 and str(intruder.pid) in html

        # Metrics: the first poll takes the buffer, later ones only newer points (since=).
        first = model.poll_metrics()
        assert first > 0 and set(model.gpu_series) == {f"wdash1:{i}" for i in range(4)}
        assert set(model.host_series) == {"wdash1"}
        count = len(model.gpu_series["wdash1:1"].t)
        wait_for(lambda: model.poll_metrics() > 0, timeout=15)
        assert len(model.gpu_series["wdash1:1"].t) > count
        t, util = model.chart("GPU utilization (%)")["wdash1:1"]
        assert len(t) == len(util) and util[-1] == 90  # 50 % + 40 % from the two processes

        usage = model.watch_usage(held["id"])
        assert usage is not None and usage["reservation"] == held["id"]
        assert usage["reserved_gpu_hours"] == 1.0

        view = DashboardView(model, interval=0.2)
        view.refresh()
        chart = view.charts["GPU utilization (%)"]
        assert set(chart.lines) == {f"wdash1:{i}" for i in range(4)}
        points = len(chart.lines["wdash1:1"].x)
        view.start()
        wait_for(
            lambda: view.poller.rounds >= 3 and len(chart.lines["wdash1:1"].x) > points, timeout=15
        )
        view.stop()
        assert not view.poller.running and view.poller.last_error == ""
        assert f"Reservation {held['id']}" in view.usage.value
        assert view.reservation.value == held["id"]
        assert [c.title for c in view.grid.children] == list(view.order.value)
        view.order.value = ["Host CPU (%)", "GPU power (W)"]
        assert [c.title for c in view.grid.children] == ["Host CPU (%)", "GPU power (W)"]
    finally:
        for p in procs:
            p.kill()
            p.wait()
