"""'Not reported' means the same everywhere (issue #32 item 8): a MIG user whose utilisation the
driver does not report is not scored idle, not cut by an efficiency tier, not ended as idle or
released as a no-show for it, and memory that is not reported is stored as NULL, not 0."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import select

from jupyter_gpuhive.bookings.accounting import scores
from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.hosts.vendors.nvidia_smi import GpuMetrics, MigDevice
from jupyter_gpuhive.model import UTC
from jupyter_gpuhive.model.limits import Effective, Limits, Tier, apply_tiers
from jupyter_gpuhive.monitor.accounting import Payers, Reading, charge
from jupyter_gpuhive.protection.noshow import attended
from jupyter_gpuhive.protection.violations import idle_reservations
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.accounting import RESERVED
from jupyter_gpuhive.store.schema import gpu_usage_hourly, reservation_usage
from jupyter_gpuhive.store.usage import GpuReading
from tests.mig.helpers import SLICES, mig_host, unit

BASE = datetime(2030, 3, 4, 10, tzinfo=UTC)
TIER = Tier(efficiency_below=30, limit="gpus", factor=0.5)


def _mig_sample(at: datetime, *, process: bool) -> HostSample:
    """mig1 with GPU 0 in MIG mode (no utilisation reported) and alice's slice mig5 on it."""
    decl = mig_host("mig1").gpus
    gpu0 = GpuMetrics(0, decl[0].uuid, "NVIDIA A100-SXM4-80GB", None, None, 700, 81920, 30,
                      55.0, None, mig_enabled=True)  # fmt: skip
    parts = (MigDevice(1, 5, 0, 700, 19968, 28, SLICES[1].uuid, "2g.20gb"),)
    procs = (ProcessInfo(4242, decl[0].uuid, "alice", "python", 700, mig_uuid=SLICES[1].uuid),)
    return HostSample("mig1", at, (gpu0,), processes=procs if process else (),
                      slices={gpu0.uuid: parts}, mig_uuids={gpu0.uuid: (SLICES[1].uuid,)})  # fmt: skip


def test_unreported_utilisation_is_not_idle(store: Store) -> None:
    part = unit(store, "mig1:0/mig5")
    res = store.reservations.create("alice", "t", "", BASE, BASE + timedelta(hours=2), [part.id])
    at = BASE + timedelta(minutes=5)
    # No process and no utilisation reported: not known to be idle (it was: None read as idle).
    assert idle_reservations([_mig_sample(at, process=False)], [res], at) == {}
    # Her process on the slice: she showed up, whatever the driver says of utilisation.
    assert attended(res, {"mig1": _mig_sample(at, process=True)}, {}, "alice") is True


def test_unrated_time_is_neither_idle_nor_busy_for_efficiency() -> None:
    decl = mig_host("mig1").gpus
    at = BASE + timedelta(minutes=1)
    before, after = (Reading(t, 100.0, None, frozenset({"alice"})) for t in (BASE, at))
    from jupyter_gpuhive.model import Gpu, Reservation

    whole = Gpu(id=1, host="mig1", index=0, uuid=decl[0].uuid)
    held = Reservation(id=1, owner="alice", title="", description="", start=BASE,
                       end=BASE + timedelta(hours=1), gpus=(whole,), created_at=BASE)  # fmt: skip
    [c] = charge(1, decl[0].uuid, before, after, Payers.at(at, [held], [], str), ZoneInfo("UTC"))
    assert (c.kind, c.util_seconds, c.unrated_seconds) == (RESERVED, 0.0, 60.0)

    class Booked:  # one hour on a whole GPU in MIG mode, one hour on a slice
        def __init__(self, gpu_id: int, slice_: bool) -> None:
            self.owner, self.start, self.end = "alice", BASE, BASE + timedelta(hours=1)
            self.gpu_id, self.slice, self.share = gpu_id, slice_, 1.0

    booked = [Booked(1, False), Booked(2, True)]
    charged = {("alice", RESERVED): {"seconds": 3600.0, "used_seconds": 3600.0,
                                     "util_seconds": 0.0, "unrated_seconds": 3600.0}}  # fmt: skip
    [score] = scores(["alice"], booked, charged, {}, {}, BASE, BASE + timedelta(hours=2))  # type: ignore[arg-type]
    assert score["efficiency"] is None  # was 0.0: "idle"
    assert score["unmeasured_gpu_hours"] == 2.0 and score["reserved_gpu_hours"] == 2.0
    limits = Effective(Limits(gpus=4), {}, {})
    assert apply_tiers(limits, (TIER,), score["efficiency"], "30 days").limits.gpus == 4
    # A measured hour at 20 % beside the slice hour: efficiency over the measured hour only.
    rated = {("alice", RESERVED): {"seconds": 3600.0, "used_seconds": 3600.0,
                                   "util_seconds": 720.0, "unrated_seconds": 0.0}}  # fmt: skip
    [score] = scores(["alice"], booked, rated, {}, {}, BASE, BASE + timedelta(hours=2))  # type: ignore[arg-type]
    assert (score["efficiency"], score["unmeasured_gpu_hours"]) == (20.0, 1.0)


def test_unreported_memory_is_null_not_zero(store: Store) -> None:
    part = unit(store, "mig1:0/mig5")
    res = store.reservations.create("alice", "t", "", BASE, BASE + timedelta(hours=2), [part.id])
    whole = unit(store, "mig1:1")
    for minute, mem in ((1, None), (2, 600), (3, None)):
        readings = [GpuReading(part.id, 60.0, None, mem, frozenset({"alice"}), hourly=False),
                    GpuReading(whole.id, 60.0, 10.0, None, frozenset())]  # fmt: skip
        store.usage.record(BASE + timedelta(minutes=minute), readings, [res])
    with store.db.read() as conn:
        row = conn.execute(select(reservation_usage)).one()
        hourly = conn.execute(select(gpu_usage_hourly)).one()
    assert (row.mem_sum_mib, row.mem_samples) == (600.0, 1)
    assert (hourly.mem_sum_mib, hourly.mem_samples) == (None, 0)  # was 0: "0 MiB"
    [entry] = store.usage.for_reservation(store.reservations.get(res.id))["gpus"]
    assert entry["mean_mem_mib"] == 600.0  # was 200: the unreported samples read as 0 MiB
    window = dict(store.usage.window(BASE, BASE + timedelta(hours=1))["gpus"])
    assert window[whole.id]["mean_mem_mib"] is None
    assert window[whole.id]["mem_label"] == "not reported"


def test_the_scores_table_says_what_was_not_measured() -> None:
    from jupyter_gpuhive.widgets.accounting_view import SCORE_COLUMNS, _score

    assert ("unmeasured_gpu_hours", "not measured h") in SCORE_COLUMNS
    slice_user = {"efficiency": None, "unmeasured_gpu_hours": 2.0}
    assert _score(slice_user, "efficiency") == "not measured"
    assert _score({"efficiency": None, "unmeasured_gpu_hours": 0.0}, "efficiency") == "–"
