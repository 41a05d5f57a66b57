"""Usage of MIG slices, on SQLite and PostgreSQL: a slice reservation's usage is recorded
(memory, processes), and utilisation the driver does not report is 'not reported', never 0 %."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, text

from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.hosts.vendors.nvidia_smi import GpuMetrics, MigDevice
from jupyter_gpuhive.model import UTC
from jupyter_gpuhive.monitor.sampler import Sweep
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import UTCDateTime
from jupyter_gpuhive.store.usage import GpuReading
from tests.conftest import HOSTS, book, soon
from tests.mig.helpers import SLICES, mig_host, unit

BASE = datetime(2030, 3, 4, 10, tzinfo=UTC)


def test_unreported_utilisation_is_null_and_means_skip_it(store: Store) -> None:
    part, whole = unit(store, "mig1:0/mig5"), unit(store, "mig1:1")
    res = store.reservations.create("alice", "t", "", BASE, BASE + timedelta(hours=2),
                                    [part.id, whole.id])  # fmt: skip
    only_slice = store.reservations.create("bob", "t", "", BASE, BASE + timedelta(hours=2),
                                           [unit(store, "mig1:0/mig13").id])  # fmt: skip
    for minute, util in ((1, 40.0), (2, None), (3, 20.0)):  # GPU 1 stops reporting once
        readings = [
            GpuReading(part.id, 60.0, None, 700, frozenset({"alice"}), hourly=False),
            GpuReading(whole.id, 60.0, util, 1000, frozenset()),
            GpuReading(unit(store, "mig1:0/mig13").id, 60.0, None, 300, frozenset(), False),
        ]
        active = store.reservations.window(BASE, BASE + timedelta(hours=1))
        store.usage.record(BASE + timedelta(minutes=minute), readings, active)

    got = store.usage.for_reservation(store.reservations.get(res.id))
    by_ref = {g["gpu"]: g for g in got["gpus"]}
    sliced = by_ref["mig1:0/mig5"]
    assert sliced["samples"] == 3 and sliced["mean_mem_mib"] == 700.0
    assert sliced["mean_util"] is None and sliced["max_util"] is None  # was 0.0: "0 %"
    assert sliced["util_label"] == "not reported"
    assert sliced["used_gpu_hours"] == round(180 / 3600, 4)  # alice's process kept it busy
    assert (by_ref["mig1:1"]["mean_util"], by_ref["mig1:1"]["max_util"]) == (30.0, 40.0)
    assert "util_label" not in by_ref["mig1:1"]
    assert (got["mean_util"], got["max_util"]) == (30.0, 40.0) and "util_label" not in got
    alone = store.usage.for_reservation(store.reservations.get(only_slice.id))
    assert alone["mean_util"] is None and alone["util_label"] == "not reported"
    summed = store.usage.by_reservation([res.id, only_slice.id])
    assert summed[res.id]["mean_util"] == 30.0
    assert summed[only_slice.id]["util_label"] == "not reported"
    # The hourly table counts physical GPUs only (a slice's process also occupies its GPU).
    window = dict(store.usage.window(BASE, BASE + timedelta(hours=1))["gpus"])
    assert set(window) == {whole.id} and window[whole.id]["mean_util"] == 30.0


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    mig = {"name": "mig1", "address": "127.0.0.1", "transport": "local", "gpu_count": 2}
    return {**hive_config, "hosts": [*HOSTS, mig], "unix_users": {"alice": "gh-alice"}}


@pytest.fixture
def hive(jp_serverapp: Any) -> Any:
    running = jp_serverapp.web_app.settings["gpuhive"]
    running.store.inventory.sync([mig_host("mig1")])
    return running


async def test_a_sweep_records_a_slice_reservations_usage(api: Any, hive: Any) -> None:
    alice = api("alice")
    t = soon(40)
    held = await book(alice, "on 2g", ["mig1:0/mig5"], t, "2h")
    decl = mig_host("mig1").gpus
    gpu0 = GpuMetrics(0, decl[0].uuid, "NVIDIA A100-SXM4-80GB", None, None, 1200, 81920, 30,
                      55.0, None, mig_enabled=True)  # fmt: skip
    gpu1 = GpuMetrics(1, decl[1].uuid, "NVIDIA A100-SXM4-80GB", 4, 0, 10, 81920, 30, 55.0,
                      None, mig_enabled=False)  # fmt: skip
    parts = (MigDevice(0, 1, 0, 0, 40192, 42, SLICES[0].uuid, "3g.40gb"),
             MigDevice(1, 5, 0, 700, 19968, 28, SLICES[1].uuid, "2g.20gb"))  # fmt: skip
    proc = ProcessInfo(4242, decl[0].uuid, "gh-alice", "python", 700, mig_uuid=SLICES[1].uuid)
    for minute in (1, 2):
        at = t + timedelta(minutes=minute)
        sample = HostSample("mig1", at, (gpu0, gpu1), processes=(proc,),
                            slices={gpu0.uuid: parts})  # fmt: skip
        await hive.monitor._record_usage(Sweep(at, 30.0, {"mig1": sample}))

    got = await alice("GET", f"reservations/{held.body['id']}/usage")
    assert got.status == 200, got
    [entry] = got.body["gpus"]
    assert entry["gpu"] == "mig1:0/mig5" and entry["samples"] == 2  # 0 before: not recorded
    assert entry["mean_mem_mib"] == 700.0 and entry["used_gpu_hours"] > 0
    assert entry["mean_util"] is None and entry["util_label"] == "not reported"
    assert got.body["mean_util"] is None and got.body["util_label"] == "not reported"
    report = await api("boss")("GET", "usage", params={"start": t.isoformat(),
                                                      "end": (t + timedelta(hours=1)).isoformat()})  # fmt: skip
    assert report.status == 200, report
    rows = {row["gpu"]: row for row in report.body["by_gpu"]}
    # GPU 0 in MIG mode reports no utilisation either: 'not reported', not 0 %
    assert rows["mig1:0"]["mean_util"] is None and rows["mig1:0"]["util_label"] == "not reported"
    assert rows["mig1:1"]["mean_util"] == 4.0


def test_the_migration_keeps_old_rows_as_reported(db_url: str) -> None:
    old = Store(db_url)
    old.db.migrate("0012")
    hour = {"t": BASE}
    with old.db.writer.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO hosts (name, address, port, transport, declared, created_at) "
                "VALUES ('gpu1', '127.0.0.1', 22, 'local', true, :t)"
            ).bindparams(bindparam("t", type_=UTCDateTime)),
            hour,
        )
        conn.execute(
            text("INSERT INTO gpus (host_id, idx, uuid) SELECT id, 0, 'GPU-old-0' FROM hosts")
        )
        conn.execute(
            text(
                "INSERT INTO gpu_usage_hourly (gpu_id, hour, user_name, samples, seconds, "
                "busy_seconds, util_sum, util_max, mem_sum_mib) SELECT id, :t, 'ann', 3, 180, "
                "180, 90, 50, 300 FROM gpus"
            ).bindparams(bindparam("t", type_=UTCDateTime)),
            hour,
        )
    old.db.migrate()
    [(_gpu, summary)] = old.usage.window(BASE, BASE + timedelta(hours=1))["gpus"]
    assert (summary["mean_util"], summary["max_util"]) == (30.0, 50.0)
    assert "util_label" not in summary
    old.close()
