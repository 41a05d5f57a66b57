"""Shares count their part (#44): a quarter of a GPU for 4 h is 1 GPU-hour in limits, usage
scores and the accounting report; a share's no-show is released like a whole booking's."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.bookings import accounting
from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.jobs.preemption import Lending, PreemptionSettings
from jupyter_gpuhive.model import UTC, utcnow
from jupyter_gpuhive.model.shares import WHOLE
from jupyter_gpuhive.monitor.accounting import Payers, Reading, charge
from jupyter_gpuhive.protection.service import ProtectionSettings
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.accounting import IDLE, RESERVED
from jupyter_gpuhive.store.reports import booked_seconds
from tests.api.helpers import refused
from tests.api.test_api_shares import SHARED, share_of
from tests.fairshare.test_limits_api import set_limits
from tests.protection.conftest import USER_MAP, local_decl

H = timedelta(hours=1)
QUARTER = WHOLE // 4


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "hosts": SHARED}


async def test_limits_count_a_share_as_its_part_of_a_gpu(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    await set_limits(boss, "user", "alice", gpu_hours_week=2, gpus=1)
    # a quarter for 8 h is 2 GPU-hours: it fits; a quarter more for 4 h (1 GPU-hour) does not
    first = await alice("POST", "reservations", share_of(["gpu1:0"], hours=8, share=0.25))
    assert first.status == 201, first
    more = await alice("POST", "reservations", share_of(["gpu1:1"], hours=4, share=0.25))
    message = refused(more, 409, "GPU-hours")
    assert more.body["current"] == 2 and more.body["needed"] == 1, more.body
    assert "2 of your 2 GPU-hours" in message
    # 'GPUs at once' counts shares too: four quarters are one GPU
    await set_limits(boss, "user", "alice", gpu_hours_week=100, gpus=1)
    for ref in ("gpu1:1", "gpu1:2", "gpu1:3"):
        fits = await alice("POST", "reservations", share_of([ref], hours=1, share=0.25))
        assert fits.status == 201, fits
    over = await alice("POST", "reservations", share_of(["gpu1:1"], hours=1, share=0.125))
    refused(over, 409, "at once")
    assert over.body["current"] == 1 and over.body["needed"] == 0.12, over.body


def test_scores_and_the_report_count_share_times_hours(db_url: str) -> None:
    store = Store(db_url).open()
    try:
        store.inventory.sync(parse_hosts(SHARED))
        g0 = store.inventory.gpu("gpu1:0")
        g1 = store.inventory.gpu("gpu2:0")
        assert g0 is not None and g1 is not None
        start = (utcnow() - timedelta(days=3)).replace(minute=0, second=0, microsecond=0)
        create = store.reservations.create
        create("alice", "nb", "", start, start + 4 * H, [g0.id], share=QUARTER)  # 1 GPU-h
        create("bob", "train", "", start, start + 2 * H, [g1.id])  # 2 GPU-h
        booked = store.accounting.booked(start - H, start + 5 * H)
        scores = accounting.scores(["alice", "bob"], booked, {}, {}, {}, start - H, start + 5 * H)
        hours = {s["user"]: s["reserved_gpu_hours"] for s in scores}
        assert hours == {"alice": 1.0, "bob": 2.0}
        # the report's sums: within the span in SQL, across its edges clipped here
        with store.db.read() as conn:
            by_owner, _ = booked_seconds(conn, start - H, start + 5 * H)
            clipped, _ = booked_seconds(conn, start + 2 * H, start + 5 * H)
        assert by_owner == {"alice": pytest.approx(3600.0), "bob": pytest.approx(7200.0)}
        assert clipped == {"alice": pytest.approx(1800.0)}  # the share's last 2 h
    finally:
        store.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")
async def test_a_share_nobody_uses_is_released_and_one_in_use_is_kept(
    sim_users: Any, make_local_host: Any, make_rig: Any, gpu_processes: Any
) -> None:
    host = make_local_host()
    settings = ProtectionSettings(
        user_map=USER_MAP, ladder=[], noshow_after=0.6, noshow_release_after=2.0,
        noshow_handlers=["event"],
    )  # fmt: skip
    decl = dataclasses.replace(local_decl(host), shareable=True)
    rig = make_rig([decl], settings)
    await rig.sweep()
    gpu = rig.store.inventory.gpu(f"{host.name}:1")
    assert gpu is not None and gpu.shareable
    start = utcnow() - timedelta(seconds=1)
    create = rig.store.reservations.create
    used = create("alice", "nb", "", start, start + H, [gpu.id], share=QUARTER)
    absent = create("bob", "nb", "", start, start + H, [gpu.id], share=QUARTER)
    gpu_processes.append(host.start_process([1], user="gh-alice", util=0))  # hers, idle
    await rig.sweep()
    await asyncio.sleep(0.7)
    await rig.sweep()  # past the window: bob's share is a no-show
    await asyncio.sleep(max(0.0, 2.7 - (utcnow() - start).total_seconds()))
    await rig.sweep()  # past the grace: released
    await rig.protection.drain()
    released = rig.store.reservations.get(absent.id)
    assert released.end <= utcnow() and released.share_ppm == QUARTER
    assert rig.store.reservations.get(used.id).end == used.end
    (notice,) = rig.store.violations.for_reservation(absent.id)
    assert notice.kind == "no-show" and notice.holder == "bob"
    assert rig.store.violations.for_reservation(used.id) == []
    # its quarter is free again: three quarters more fit beside alice's
    for owner in ("carol", "dave", "erin"):
        create(owner, "nb", "", utcnow(), utcnow() + H, [gpu.id], share=QUARTER)
    assert start.tzinfo is UTC


def test_a_share_never_lends_its_gpu_and_whole_bookings_still_do(db_url: str) -> None:
    store = Store(db_url).open()
    try:
        store.inventory.sync(parse_hosts(SHARED))
        g0, g1 = store.inventory.gpu("gpu1:0"), store.inventory.gpu("gpu1:1")
        assert g0 is not None and g1 is not None
        start = utcnow() + H
        share = store.reservations.create("alice", "nb", "", start, start + H, [g0.id],
                                          share=QUARTER)  # fmt: skip
        whole = store.reservations.create("bob", "run", "", start, start + H, [g1.id])
        lending = Lending([share, whole], store.preemption.lending([share.id, whole.id]))
        settings = PreemptionSettings(lending=True)
        assert not lending.lends(share, settings)  # other holders share its GPU
        assert lending.lends(whole, settings)
    finally:
        store.close()


def test_metering_charges_each_share_holder_their_share_of_the_gpu(db_url: str) -> None:
    store = Store(db_url).open()
    try:
        store.inventory.sync(parse_hosts(SHARED))
        g0 = store.inventory.gpu("gpu1:0")
        assert g0 is not None
        start = utcnow() - H
        alice = store.reservations.create("alice", "nb", "", start, start + 4 * H, [g0.id],
                                          share=QUARTER)  # fmt: skip
        bob = store.reservations.create("bob", "nb", "", start, start + 4 * H, [g0.id],
                                        share=WHOLE // 2)  # fmt: skip
        at = utcnow()
        payers = Payers.at(at, [alice, bob], [], lambda u: u)
        before = Reading(at - timedelta(seconds=10), 100.0, 80.0, frozenset({"alice"}))
        after = Reading(at, 100.0, 80.0, frozenset({"alice", "bob"}))
        charges = charge(g0.id, g0.uuid, before, after, payers, UTC)
        split = {(c.payer, c.kind): c.seconds for c in charges}
        assert split == {("alice", RESERVED): 2.5, ("bob", RESERVED): 5.0, ("", IDLE): 2.5}
        assert sum(c.energy_j for c in charges) == pytest.approx(1000.0)  # all of it, once
        assert [c.subjects for c in charges][:2] == [
            (("reservation", alice.id),),
            (("reservation", bob.id),),
        ]
    finally:
        store.close()
