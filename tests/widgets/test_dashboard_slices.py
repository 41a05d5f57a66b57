"""The dashboard shows MIG slices: a row per slice under its GPU (memory, utilisation 'not
reported', holder), and a process on a booked slice is judged against the slice's holder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.notebook.client import HiveClient
from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from jupyter_gpuhive.widgets.dashboard_model import DashboardModel
from jupyter_gpuhive.widgets.dashboard_view import DashboardView, process_table, usage_text
from tests.conftest import TOKENS, USERS
from tests.sim.conftest import gpu_processes  # noqa: F401
from tests.support.server import JupyterServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as users")
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


@pytest.fixture(scope="module")
def mig_sim() -> Iterator[tuple[str, LocalSimHost]]:
    root = Path(tempfile.mkdtemp(prefix="gpuhive-dash-mig-"))
    sim = LocalSimHost("wdmig1", root / "wdmig1", profile="mig")  # a name no other test uses
    env = sim.env()
    hosts = [{"name": "wdmig1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}]
    config = {"db_url": f"sqlite:///{root / 'hive.sqlite'}", "hosts": hosts,
              "poll_interval": 0.3, "site_timezone": "UTC"}  # fmt: skip
    server = JupyterServer(config, USERS)
    yield f"http://127.0.0.1:{server.port}/", sim
    server.stop()


def test_dashboard_rows_per_slice_and_processes_on_slices(
    mig_sim: tuple[str, LocalSimHost],
    gpu_processes: list[Any],  # noqa: F811 (the shared fixture)
) -> None:
    url, sim = mig_sim
    for user in ("gh-alice", "gh-bob"):
        ensure_user(user)
    alice = HiveClient(url, TOKENS["alice"])
    model = DashboardModel(alice, unix_user=lambda name: f"gh-{name}")
    migs = sim.config.gpus[0].mig  # 3g.40gb GI 1, 2g.20gb GI 5, 1g.10gb GI 13

    def sliced() -> bool:
        model.poll_state()
        return any(g.get("slices") for h in model.state for g in h["gpus"])

    wait_for(sliced, timeout=20)
    held = alice.reserve(title="slice", gpus=["wdmig1:0/mig5"], start=datetime.now(UTC).isoformat(),
                  duration="1h")  # fmt: skip
    intruder = sim.start_process([migs[1].uuid], user="gh-bob", mem_mib=700, util=30)
    gpu_processes.append(intruder)

    def seen() -> Any:
        rows = model.poll_state()
        return [r for r in rows if r.pid == intruder.pid]

    [row] = wait_for(seen, timeout=20)
    # Before: the process counted for the whole GPU, which nobody holds: no violation.
    assert (row.gpu, row.holder, row.violation) == ("wdmig1:0/mig5", "alice", True)
    assert str(intruder.pid) in process_table(model)

    view = DashboardView(model)
    view.render()
    table = view.gpus.value
    for ref, profile in (("mig1", "3g.40gb"), ("mig5", "2g.20gb"), ("mig13", "1g.10gb")):
        assert f"↳ wdmig1:0/{ref}" in table and profile in table
    assert table.index("wdmig1:0<") < table.index("wdmig1:0/mig1") < table.index("wdmig1:0/mig13")
    slice_row = table[table.index("↳ wdmig1:0/mig5") :].split("</tr>")[0]
    assert "not reported" in slice_row and "0 %" not in slice_row
    assert " / 19968 MiB" in slice_row and "alice" in slice_row
    assert "<td style='padding:2px 8px'>wdmig1:1</td>" in table  # whole GPUs keep their rows

    # The slice reservation's usage: recorded (memory), utilisation 'not reported', not 0 %.
    def measured() -> Any:
        got = model.watch_usage(held["id"])
        return got if got and got["gpus"][0]["samples"] else None

    usage = wait_for(measured, timeout=20)
    assert usage["gpus"][0]["mean_mem_mib"] > 0
    text = usage_text(usage)
    assert "utilization not reported" in text and "%" not in text
