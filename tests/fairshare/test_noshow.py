"""No-show release on a simulated host: released when the owner never starts a process,
kept when one of theirs appears within the window."""

from __future__ import annotations

import asyncio
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.model import describe_instant, utcnow
from jupyter_gpuhive.model.hostgroups import HostGroupSettings, NoShowTimes
from jupyter_gpuhive.protection.service import ProtectionSettings
from tests.protection.conftest import USER_MAP, local_decl

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")


async def test_no_show_is_released_and_a_reservation_in_use_is_kept(
    sim_users, make_local_host, make_rig, gpu_processes
) -> None:
    host = make_local_host()
    settings = ProtectionSettings(
        user_map=USER_MAP, ladder=[], noshow_after=0.6, noshow_release_after=3.0,
        noshow_handlers=["event"],
    )  # fmt: skip
    site = ZoneInfo("Asia/Kolkata")  # the site's clock: +05:30, never UTC
    rig = make_rig([local_decl(host)], settings, zone=site)
    await rig.sweep()  # watching from here on
    absent = rig.reserve("alice", f"{host.name}:2")
    present = rig.reserve("alice", f"{host.name}:1")
    late = rig.reserve("bob", f"{host.name}:3")
    gpu_processes.append(host.start_process([1], user="gh-alice", util=0))  # idle, but hers
    await rig.sweep()
    await asyncio.sleep(0.7)
    await rig.sweep()  # past the window: absent and late are no-shows now
    await rig.protection.drain()
    assert sorted(e["reservation"] for e in rig.events) == [absent.id, late.id]
    gpu_processes.append(host.start_process([3], user="gh-bob", util=30))  # bob turns up
    await rig.sweep()  # before the release: kept
    await asyncio.sleep(max(0.0, 3.7 - (utcnow() - absent.start).total_seconds()))
    await rig.sweep()  # past the grace: absent is released
    await rig.protection.drain()

    released = rig.store.reservations.get(absent.id)
    assert released.end <= utcnow() and released.status(utcnow()) == "ended"
    assert released.start == absent.start and not released.cancelled  # history kept
    assert rig.store.reservations.get(present.id).end == present.end
    assert rig.store.reservations.get(late.id).end == late.end

    (notice,) = rig.store.violations.for_reservation(absent.id)
    assert notice.kind == "no-show" and notice.holder == "alice" and notice.offender is None
    assert notice.ended_at is not None
    assert ("release", "ok") in [(a.handler, a.outcome) for a in notice.actions]
    # People's words (#48): times on the site's clock, no ISO timestamp
    start = describe_instant(absent.start, site)
    assert notice.detail == f"no process of alice since the start at {start}", notice.detail
    details = [a.detail or "" for a in notice.actions]
    assert not any(re.search(r"\d{4}-\d\d-\d\dT\d\d:", d) for d in details), details
    assert rig.store.violations.for_reservation(present.id) == []
    (told,) = rig.store.violations.for_reservation(late.id)  # told, then kept
    assert told.kind == "no-show" and told.ended_at is not None
    assert "release" not in [a.handler for a in told.actions]

    mine = [e for e in rig.events if e["reservation"] == absent.id]
    assert [e["kind"] for e in mine] == ["no-show", "no-show"]
    assert "no process of yours" in mine[0]["message"] and "released" in mine[1]["message"]
    assert all(e["holder"] == "alice" for e in mine)


async def test_a_booking_waiting_for_approval_is_never_a_no_show(
    sim_users, make_local_host, make_rig
) -> None:
    """No job or kernel may run on a tentative booking (#46): its holder's absence is no
    no-show, then or after its approval."""
    host = make_local_host()
    settings = ProtectionSettings(
        user_map=USER_MAP, ladder=[], noshow_after=0.3, noshow_release_after=0.3,
        noshow_handlers=["event"],
    )  # fmt: skip
    rig = make_rig([local_decl(host)], settings)
    await rig.sweep()  # watching from here on
    gpu = rig.store.inventory.gpu(f"{host.name}:0")
    start = utcnow() - timedelta(seconds=1)
    waiting = rig.store.reservations.create(
        "alice", "big", "", start, start + timedelta(hours=1), [gpu.id],
        tentative=(utcnow() + timedelta(hours=2), "2 GPUs is more than 1 on host gpu1"),
    )  # fmt: skip
    absent = rig.reserve("bob", f"{host.name}:1")  # confirmed, and nobody comes: a no-show
    assert waiting.tentative and not absent.tentative
    await rig.sweep()
    await asyncio.sleep(0.8)
    await rig.sweep()
    await rig.protection.drain()
    assert rig.store.reservations.get(waiting.id).end == waiting.end  # kept whole
    assert rig.store.violations.for_reservation(waiting.id) == []
    assert [e["reservation"] for e in rig.events][:1] == [absent.id]
    assert waiting.id not in [e["reservation"] for e in rig.events]


async def sweeps_across(rig: Any, seconds: float) -> None:
    """A sweep, `seconds` later another, and what they told done."""
    await rig.sweep()
    await asyncio.sleep(seconds)
    await rig.sweep()
    await rig.protection.drain()


async def test_a_host_groups_own_times_watch_its_hosts_where_the_site_does_not(
    sim_users, make_local_host, make_rig
) -> None:
    """The site watches no no-shows; the host's group (#46) sets its own times: a booking
    nobody used there is a no-show after them; once the group turns them off, no longer."""
    host = make_local_host()
    settings = ProtectionSettings(
        user_map=USER_MAP, ladder=[], noshow_after=0.0, noshow_handlers=["event"],
        host_group=lambda name: "lab" if name == host.name else None,
    )  # fmt: skip
    rig = make_rig([local_decl(host)], settings)
    own = NoShowTimes(timedelta(seconds=0.3), timedelta(hours=1))
    rig.store.host_groups.put(HostGroupSettings("lab", noshow=own), "hedy", utcnow())
    await rig.sweep()  # watching from here on
    absent = rig.reserve("alice", f"{host.name}:0")
    await sweeps_across(rig, 0.5)
    assert [e["reservation"] for e in rig.events] == [absent.id]
    (notice,) = rig.store.violations.for_reservation(absent.id)
    assert notice.kind == "no-show" and notice.ended_at is None  # told; released in an hour
    off = NoShowTimes(timedelta(0))
    rig.store.host_groups.put(HostGroupSettings("lab", noshow=off), "hedy", utcnow())
    await rig.sweep()  # nothing watched anywhere now
    later = rig.reserve("bob", f"{host.name}:1")
    await sweeps_across(rig, 0.5)
    assert rig.store.violations.for_reservation(later.id) == []


def test_off_by_default_and_on_in_the_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from traitlets.config.loader import PyFileConfigLoader

    from jupyter_gpuhive.cli.demo import demo_hosts, write_config
    from jupyter_gpuhive.server.app import GpuHiveApp

    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))  # no hosts file there
    plain = GpuHiveApp(auto_local_host=False).settings_for_hive().protection
    assert plain.noshow_after == 0
    config = write_config(tmp_path, demo_hosts(tmp_path))
    loaded = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    demo = GpuHiveApp(config=loaded).settings_for_hive().protection
    assert (demo.noshow_after, demo.noshow_release_after) == (600, 600)
