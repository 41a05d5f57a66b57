"""Protection on a shared GPU: holders within their share are left alone, a holder over it is
an over-share violation on the ladder, anyone without a share is an intruder.

The pure rules on built sweeps first; then real processes of real UNIX users on a simulated
host, their memory as the nvidia-smi stand-in reports it per process, a real store holding the
share bookings, and the real monitor and protection loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest

from jupyter_gpuhive.hosts.probe import ProcessInfo
from jupyter_gpuhive.model import Gpu, Reservation, utcnow
from jupyter_gpuhive.model.shares import WHOLE
from jupyter_gpuhive.protection.service import ProtectionSettings
from jupyter_gpuhive.protection.violations import FOREIGN, OVER_SHARE, DetectionPolicy, detect
from jupyter_gpuhive.server.app import GpuHiveApp
from jupyter_gpuhive.sim.cluster import start_gpu_process
from tests.protection.conftest import USER_MAP, local_decl
from tests.protection.test_protection_detect import NOW, UUIDS, kinds, sample
from tests.support.waiting import until

GPU_MIB = 40960
QUARTER = WHOLE // 4  # 10240 MiB of the 40 GiB GPU


def share(owner: str, rid: int, part: int = QUARTER, gpu: int = 0) -> Reservation:
    start = NOW - timedelta(hours=1)
    booked = (Gpu(10 + gpu, "h1", gpu, UUIDS[gpu], memory_mib=GPU_MIB, shareable=True),)
    return Reservation(rid, owner, "t", "", start, start + timedelta(hours=2), booked, start,
                       share_ppm=part)  # fmt: skip


def proc(pid: int, user: str, mib: int, command: str = "python train.py") -> ProcessInfo:
    return ProcessInfo(pid, UUIDS[0], user, command, mib)


POLICY = DetectionPolicy.build(1)


def test_holders_within_their_shares_are_left_alone() -> None:
    found = detect([sample(proc(11, "ann", 10000), proc(12, "ben", 9000), proc(13, "ben", 1000))],
                   [share("ann", 1), share("ben", 2)], NOW, POLICY)  # fmt: skip
    assert found == []


def test_a_holder_over_the_share_is_an_over_share_violation() -> None:
    # Each process keeps under the share; together they use 12000 MiB of 10240.
    s = sample(proc(11, "ann", 6000), proc(12, "ann", 6000), proc(13, "ben", 500))
    found = detect([s], [share("ann", 1), share("ben", 2)], NOW, POLICY)
    assert kinds(found) == [(OVER_SHARE, "h1:0", "ann", (11, 12))]
    (v,) = found
    assert (v.holder, v.reservation_id, v.level) == ("ann", 1, 1)
    assert v.detail == "uses 12000 MiB of a 10240 MiB share (tolerance 512 MiB)"


def test_the_tolerance_is_the_policys() -> None:
    s = sample(proc(11, "ann", 10240 + 512))  # at the tolerance: not over it
    assert detect([s], [share("ann", 1)], NOW, POLICY) == []
    strict = DetectionPolicy.build(1, over_share_mib=0)
    assert kinds(detect([s], [share("ann", 1)], NOW, strict)) == [
        (OVER_SHARE, "h1:0", "ann", (11,))
    ]
    with pytest.raises(ValueError, match="tolerance must not be negative"):
        DetectionPolicy.build(1, over_share_mib=-1)


def test_a_holder_of_two_shares_has_their_sum_and_jobs_count_as_theirs() -> None:
    # ann holds two quarters; her job's process (run as its own UNIX user) counts as hers.
    s = sample(proc(11, "ann", 15000), proc(12, "svc-job", 5000))
    active = [share("ann", 1), share("ann", 2), share("ben", 3)]
    assert detect([s], active, NOW, POLICY, job_owners={("h1", 12): "ann"}) == []
    s = sample(proc(11, "ann", 16000), proc(12, "svc-job", 5000))
    found = detect([s], active, NOW, POLICY, job_owners={("h1", 12): "ann"})
    assert kinds(found) == [(OVER_SHARE, "h1:0", "ann", (11, 12))]
    assert "of a 20480 MiB share" in (found[0].detail or "")


def test_someone_without_a_share_is_an_intruder_whatever_their_process_says() -> None:
    # Mallory names her process like ann's job and claims a share in its words: only the
    # owner the kernel reports counts. She is foreign; ann, within her share, is not flagged.
    lies = "gpuhive-7-ann-train GPUHIVE_SHARE=1 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G"
    s = sample(proc(11, "ann", 1000), proc(21, "mallory", 500, command=lies))
    found = detect([s], [share("ann", 1), share("ben", 2)], NOW, POLICY)
    assert kinds(found) == [(FOREIGN, "h1:0", "mallory", (21,))]
    assert (found[0].holder, found[0].reservation_id) == ("ann", 1)


def test_a_whole_gpu_booking_is_judged_as_before() -> None:
    whole = replace(share("ann", 1), share_ppm=WHOLE)
    found = detect([sample(proc(11, "ann", 39000), proc(12, "ben", 10))], [whole], NOW, POLICY)
    assert kinds(found) == [(FOREIGN, "h1:0", "ben", (12,))]  # no share: no over-share


async def test_real_processes_over_a_share_go_up_the_ladder(
    sim_users, make_local_host, make_rig, gpu_processes
) -> None:
    host = make_local_host()
    decl = replace(local_decl(host), shareable=True)
    settings = ProtectionSettings(level=1, user_map=USER_MAP, over_share_mib=256,
                                  ladder=[{"after": 0, "handler": "event"},
                                          {"after": 0.5, "handler": "kill", "signal": "KILL"}],
                                  handlers={"kill": {"mode": "user"}})  # fmt: skip
    rig = make_rig([decl], settings, interval=0.5)
    await rig.sweep()  # discovery fills the inventory
    gpu = rig.store.inventory.gpu(f"{host.name}:0")
    assert gpu is not None and gpu.memory_mib
    quarter = gpu.memory_mib // 4

    def book(owner: str) -> Reservation:
        start = utcnow() - timedelta(seconds=1)
        return rig.store.reservations.create(owner, "share", "", start, start + timedelta(hours=1),
                                             [gpu.id], share=QUARTER)  # fmt: skip

    alice = await asyncio.to_thread(book, "alice")
    await asyncio.to_thread(book, "bob")
    config = host.config_path
    within = start_gpu_process(host.name, [0], user="gh-bob", mem_mib=quarter - 100, config=config)
    first = start_gpu_process(host.name, [0], user="gh-alice", mem_mib=quarter // 2, config=config)
    gpu_processes.extend([within, first])
    rig.monitor.start()
    try:
        await rig.sweep()
        assert rig.history() == []  # both within their shares
        # Alice's second process takes her over the quarter: the ladder acts on her processes.
        over = start_gpu_process(host.name, [0], user="gh-alice", mem_mib=quarter, config=config)
        gpu_processes.append(over)
        await until(lambda: over.poll() is not None and first.poll() is not None, timeout=30)
        record = await until(lambda: [v for v in rig.history() if v.kind == OVER_SHARE], timeout=15)
    finally:
        await rig.monitor.stop()
        await rig.protection.drain()
    (violation,) = record
    assert (violation.offender, violation.holder) == ("gh-alice", "alice")
    assert violation.reservation_id == alice.id
    assert set(violation.pids) == {first.pid, over.pid}
    used = quarter // 2 + quarter
    assert violation.detail == f"uses {used} MiB of a {quarter} MiB share (tolerance 256 MiB)"
    assert within.poll() is None  # bob kept to his share: untouched
    assert not [v for v in rig.history() if v.offender == "gh-bob"]


async def test_a_user_without_a_share_who_claims_one_is_an_intruder_for_real(
    sim_users, make_local_host, make_rig, gpu_processes
) -> None:
    """Bob holds no share of the GPU. His real process names itself like Alice's job and
    carries a share, a cap and an MPS limit in its environment: it is foreign all the same,
    and Alice, within her share, is judged on nothing he wrote."""
    host = make_local_host()
    rig = make_rig([replace(local_decl(host), shareable=True)],
                   ProtectionSettings(level=1, user_map=USER_MAP))  # fmt: skip
    await rig.sweep()
    gpu = rig.store.inventory.gpu(f"{host.name}:0")
    assert gpu is not None and gpu.memory_mib
    start = utcnow() - timedelta(seconds=1)
    alice = await asyncio.to_thread(rig.store.reservations.create, "alice", "share", "", start,
                                    start + timedelta(hours=1), [gpu.id], share=QUARTER)  # fmt: skip
    claims = {"GPUHIVE_SHARE": "1", "GPUHIVE_SHARE_MIB": str(gpu.memory_mib),
              "GPUHIVE_KERNEL_RESERVATION": str(alice.id),
              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{gpu.uuid}={gpu.memory_mib}M"}  # fmt: skip
    fake = ["/bin/bash", "-c", "exec -a gpuhive-7-alice-train sleep 600"]
    config = host.config_path
    hers = start_gpu_process(host.name, [0], user="gh-alice", mem_mib=100, config=config)
    his = start_gpu_process(host.name, [0], user="gh-bob", mem_mib=100, env=claims,
                            command=fake, config=config)  # fmt: skip
    gpu_processes.extend([hers, his])

    async def judged() -> list:
        await rig.sweep()
        return rig.history()

    found = await until(judged, timeout=20)
    assert [(v.kind, v.offender, v.holder, v.pids) for v in found] == [
        ("foreign", "gh-bob", "alice", (his.pid,))
    ]


def test_the_site_sets_the_tolerance() -> None:
    """c.GpuHiveApp.over_share_mib reaches protection's policy (512 MiB unless set)."""
    assert GpuHiveApp(auto_local_host=False).settings_for_hive().protection.over_share_mib == 512
    site = GpuHiveApp(auto_local_host=False, over_share_mib=128).settings_for_hive()
    assert site.protection.over_share_mib == 128
