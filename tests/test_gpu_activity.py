"""One rule for "a busy GPU" (model.activity, issue #42 item 6): usage's busy seconds and
accounting's used seconds go through it, with the same answers at every edge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jupyter_gpuhive.model.activity import IDLE_UTIL, gpu_busy
from jupyter_gpuhive.monitor.accounting import Payers, Reading, charge
from jupyter_gpuhive.store.usage import GpuReading

# (a process on it, utilisation) → busy, idle or not known
CASES = [
    (True, None, True),
    (True, 0.0, True),
    (False, None, None),  # a MIG slice without processes: no utilisation reported
    (False, 0.0, False),
    (False, IDLE_UTIL - 0.5, False),
    (False, IDLE_UTIL, True),  # the threshold itself is busy
    (False, 97.0, True),
]


@pytest.mark.parametrize(("processes", "util", "busy"), CASES)
def test_the_rule(processes: bool, util: float | None, busy: bool | None) -> None:
    assert gpu_busy(processes, util) is busy


@pytest.mark.parametrize(("processes", "util", "busy"), CASES)
def test_usage_and_accounting_charge_by_the_rule(
    processes: bool, util: float | None, busy: bool | None
) -> None:
    users = frozenset({"alice"}) if processes else frozenset()
    reading = GpuReading(gpu_id=1, seconds=10.0, util=util, mem_used_mib=None, owners=users)
    assert reading.busy is (busy is True)
    at = datetime(2026, 5, 4, 10, tzinfo=UTC)
    before = Reading(at, None, util, users)
    after = Reading(at + timedelta(seconds=10), None, util, users)
    payers = Payers(holders={}, tasks={}, user_of=str)
    charged = charge(1, "GPU-1", before, after, payers, UTC)
    used = sum(c.used_seconds for c in charged)
    assert used == (10.0 if busy is True else 0.0)


def test_accounting_takes_the_sites_threshold() -> None:
    at = datetime(2026, 5, 4, 10, tzinfo=UTC)
    before = Reading(at, None, 20.0, frozenset())
    after = Reading(at + timedelta(seconds=10), None, 20.0, frozenset())
    payers = Payers(holders={}, tasks={}, user_of=str)
    assert sum(c.used_seconds for c in charge(1, "G", before, after, payers, UTC, 30.0)) == 0.0
    assert gpu_busy(False, 20.0, 30.0) is False
