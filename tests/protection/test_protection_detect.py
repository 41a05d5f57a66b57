"""Detection is a pure function of a sweep, the active reservations and running jobs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.hosts.vendors.nvidia_smi import GpuMetrics
from jupyter_gpuhive.model import Gpu, Reservation
from jupyter_gpuhive.protection.violations import (
    FOREIGN,
    GHOST,
    UNRESERVED,
    DetectionPolicy,
    detect,
    idle_reservations,
)

NOW = datetime(2026, 5, 4, 10, 0, tzinfo=timezone.utc)
UUIDS = [f"GPU-{i:04d}" for i in range(4)]


def metrics(i: int, util: int | None = 0, mem: int | None = 4) -> GpuMetrics:
    return GpuMetrics(i, UUIDS[i], "A100", util, 0, mem, 40960, 30, 55.0, None)


def proc(pid: int, gpu: int, user: str | None, command: str = "python train.py") -> ProcessInfo:
    return ProcessInfo(pid, UUIDS[gpu], user, command, 1000)


def sample(
    *procs: ProcessInfo, gpus: list[GpuMetrics] | None = None, host: str = "h1"
) -> HostSample:
    used = {p.gpu_uuid for p in procs}
    gpus = gpus or [metrics(i, 50 if UUIDS[i] in used else 0) for i in range(4)]
    return HostSample(host, NOW, tuple(gpus), tuple(procs))


def reservation(owner: str, *gpus: int, rid: int = 1, start: datetime | None = None) -> Reservation:
    start = start or NOW - timedelta(hours=1)
    booked = tuple(Gpu(10 + g, "h1", g, UUIDS[g]) for g in gpus)
    return Reservation(rid, owner, "t", "", start, start + timedelta(hours=2), booked, start)


def kinds(found: list) -> list[tuple[str, str, str | None, tuple[int, ...]]]:
    return [(f.kind, f.gpu, f.offender, f.pids) for f in found]


LEVEL1 = DetectionPolicy.build(1)
LEVEL2 = DetectionPolicy.build(2)


def test_level_1_flags_others_on_reserved_gpus_only() -> None:
    s = sample(proc(11, 0, "alice"), proc(12, 0, "bob"), proc(13, 0, "bob"), proc(14, 2, "carol"))
    found = detect([s], [reservation("alice", 0)], NOW, LEVEL1)
    assert kinds(found) == [(FOREIGN, "h1:0", "bob", (12, 13))]
    assert (found[0].holder, found[0].reservation_id, found[0].level) == ("alice", 1, 1)
    assert found[0].started_at == NOW


def test_level_2_also_flags_unreserved_gpus_and_level_0_nothing() -> None:
    s = sample(proc(12, 0, "bob"), proc(14, 2, "carol"))
    res = [reservation("alice", 0)]
    assert kinds(detect([s], res, NOW, LEVEL2)) == [
        (FOREIGN, "h1:0", "bob", (12,)),
        (UNRESERVED, "h1:2", "carol", (14,)),
    ]
    assert detect([s], res, NOW, DetectionPolicy.build(0)) == []


def test_holders_unix_name_and_own_jobs_are_never_violations() -> None:
    s = sample(proc(11, 0, "gh-alice"), proc(12, 0, "jobrunner"), proc(13, 0, "jobrunner"))
    jobs = {("h1", 12): "alice", ("h1", 13): "bob"}  # 13 is bob's job: still a violation
    found = detect(
        [s], [reservation("alice", 0)], NOW, LEVEL1, job_owners=jobs,
        unix_user={"alice": "gh-alice"}.get,  # type: ignore[arg-type]
    )  # fmt: skip
    assert kinds(found) == [(FOREIGN, "h1:0", "jobrunner", (13,))]


def test_allow_list_users_and_command_patterns() -> None:
    s = sample(
        proc(1, 0, "root", "/usr/lib/xorg/Xorg :0"),
        proc(2, 0, "gdm", "/usr/bin/gnome-shell"),
        proc(3, 0, "bob", "python train.py"),
    )
    policy = DetectionPolicy.build(1, allow_users={"root"}, allow_commands=[r"gnome-shell$"])
    assert kinds(detect([s], [reservation("alice", 0)], NOW, policy)) == [
        (FOREIGN, "h1:0", "bob", (3,))
    ]


def test_ghost_occupancy_memory_or_utilization_without_processes() -> None:
    gpus = [metrics(0, 0, 8000), metrics(1, 60, 4), metrics(2, 0, 4), metrics(3, 0, 9000)]
    s = sample(gpus=gpus)
    found = detect([s], [reservation("alice", 0, 1)], NOW, LEVEL1)
    assert kinds(found) == [(GHOST, "h1:0", None, ()), (GHOST, "h1:1", None, ())]
    assert "8000 MiB" in (found[0].detail or "") and "60%" in (found[1].detail or "")
    everywhere = detect([s], [], NOW, LEVEL2)
    assert [f.gpu for f in everywhere] == ["h1:0", "h1:1", "h1:3"]
    off = DetectionPolicy.build(2, ghost_mem_mib=0, ghost_util=0)
    assert detect([s], [], NOW, off) == []


def test_unknown_owner_failed_hosts_and_other_times_are_ignored() -> None:
    s = sample(proc(12, 0, None))  # exited before ps saw it
    assert detect([s], [reservation("alice", 0)], NOW, LEVEL1) == []
    broken = HostSample("h1", NOW, gpu_error="nvidia-smi failed")
    assert detect([broken], [reservation("alice", 0)], NOW, LEVEL2) == []
    later = reservation("alice", 0, start=NOW + timedelta(minutes=5))
    assert kinds(detect([sample(proc(12, 0, "bob"))], [later], NOW, LEVEL1)) == []


def test_mig_slice_processes_count_for_their_gpu() -> None:
    s = HostSample(
        "h1", NOW, (metrics(0, None, 5000),), (ProcessInfo(7, "MIG-abc", "bob", "x", 5000),),
        mig_uuids={UUIDS[0]: ("MIG-abc",)},
    )  # fmt: skip
    assert kinds(detect([s], [reservation("alice", 0)], NOW, LEVEL1)) == [
        (FOREIGN, "h1:0", "bob", (7,))
    ]


def test_finding_key_changes_with_reservation() -> None:
    s = sample(proc(12, 0, "bob"))
    one = detect([s], [reservation("alice", 0, rid=1)], NOW, LEVEL1)[0]
    two = detect([s], [reservation("alice", 0, rid=2)], NOW, LEVEL1)[0]
    assert one.key != two.key


def test_idle_reservations_need_every_gpu_seen_and_quiet() -> None:
    busy = sample(proc(11, 1, "alice"))
    res = [reservation("alice", 0, rid=1), reservation("alice", 1, 2, rid=2)]
    assert set(idle_reservations([busy], res, NOW)) == {1}
    quiet = sample()
    assert set(idle_reservations([quiet], res, NOW)) == {1, 2}
    hot = sample(gpus=[metrics(0, 30), metrics(1), metrics(2), metrics(3)])
    assert set(idle_reservations([hot], res, NOW, util_below=5)) == {2}
    assert idle_reservations([], res, NOW) == {}  # nothing seen: nothing is idle


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": 3}, "level must be 0, 1 or 2"),
        ({"allow_commands": ["(unclosed"]}, "(unclosed"),
        ({"ghost_mem_mib": -1}, "must not be negative"),
    ],
)
def test_bad_policy_is_refused_clearly(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        DetectionPolicy.build(**kwargs)
