"""Accounting of lent GPUs (issue #31): the borrowing job's owner pays, never the lender."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jupyter_gpuhive.model import Gpu, Reservation
from jupyter_gpuhive.monitor.accounting import Payers, Reading, charge
from jupyter_gpuhive.store.accounting import QUEUED, RESERVED, RunningTask


def test_time_on_a_lent_gpu_is_charged_to_the_borrower_not_the_lender() -> None:
    at = datetime.now(UTC).replace(microsecond=0)
    gpu = Gpu(1, "h1", 0, "GPU-lent")
    res = Reservation(7, "carol", "idle", "", at - timedelta(hours=1), at + timedelta(hours=1),
                      (gpu,), at - timedelta(days=1))  # fmt: skip
    task = RunningTask(42, "bob", True, ("GPU-lent",))
    before = Reading(at - timedelta(seconds=5), 100.0, 90.0, frozenset({"bob"}))
    after = Reading(at, 100.0, 90.0, frozenset({"bob"}))

    lent = Payers.at(at, [res], [task], lambda u: u, frozenset({42}))
    [paid] = charge(gpu.id, gpu.uuid, before, after, lent, UTC)
    assert (paid.payer, paid.kind, paid.seconds) == ("bob", QUEUED, 5.0)
    assert ("reservation", 7) in paid.subjects and ("job", 42) in paid.subjects

    # Without a loan (a job on someone's reservation for any other reason) the holder pays.
    kept = Payers.at(at, [res], [task], lambda u: u)
    [paid] = charge(gpu.id, gpu.uuid, before, after, kept, UTC)
    assert (paid.payer, paid.kind) == ("carol", RESERVED)
