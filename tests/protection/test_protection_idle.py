"""Idle reserved GPUs: the holder is told, and with the policy on the reservation ends early."""

from __future__ import annotations

import asyncio
import os
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.model import utcnow
from jupyter_gpuhive.protection.idle import idle_since
from jupyter_gpuhive.protection.service import ProtectionSettings
from jupyter_gpuhive.sim.cluster import start_gpu_process
from tests.protection.conftest import USER_MAP, local_decl

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")
SITE = ZoneInfo("Asia/Kolkata")  # the site's clock: +05:30, never UTC
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:")


async def test_idle_reservation_is_reported_then_ended_early(
    sim_users, make_local_host, make_rig, smtp_server, gpu_processes
) -> None:
    host = make_local_host()
    settings = ProtectionSettings(
        user_map=USER_MAP,
        ladder=[],
        idle_after=0.5,
        idle_end=True,
        idle_end_after=0.5,
        idle_handlers=["event", "email"],
        handlers={
            "email": {"port": smtp_server.port, "host": "127.0.0.1", "sender": "hive@x.org",
                      "address_template": "{user}@x.org", "admins": ["admin@x.org"]},
        },
    )  # fmt: skip
    rig = make_rig([local_decl(host)], settings, zone=SITE)
    await rig.sweep()
    idle = rig.reserve("alice", f"{host.name}:2")
    busy = rig.reserve("alice", f"{host.name}:1")
    gpu_processes.append(start_gpu_process(host.name, [1], user="gh-alice", util=50))
    for _ in range(3):
        await rig.sweep()
        await asyncio.sleep(0.6)
    await rig.sweep()
    await rig.protection.drain()

    ended = rig.store.reservations.get(idle.id)
    assert ended.end <= utcnow() and ended.status(utcnow()) == "ended"
    assert rig.store.reservations.get(busy.id).end == busy.end  # in use: untouched

    messages = [e["message"] for e in rig.events]
    assert len(messages) == 2 and all(e["holder"] == "alice" for e in rig.events)
    assert "idle since" in messages[0] and "ended early" in messages[1]
    assert [m["to"] for m in smtp_server.messages] == [["alice@x.org"], ["alice@x.org"]]

    (record,) = rig.store.violations.for_reservation(idle.id)
    assert record.kind == "idle" and record.holder == "alice" and record.offender is None
    actions = [(a.handler, a.outcome) for a in record.actions]
    assert ("end-reservation", "ok") in actions and actions.count(("event", "ok")) == 2
    assert rig.store.violations.for_reservation(busy.id) == []
    # People's words (#48): the detail gives the time on the site's clock, no ISO timestamp,
    # and a new leader reads it back (to end the reservation on time).
    details = [record.detail or ""] + [a.detail or "" for a in record.actions]
    assert not any(ISO.search(d) for d in details), details
    assert re.fullmatch(r"idle since \w{3} \d{4}-\d\d-\d\d \d\d:\d\d", record.detail or "")
    since = idle_since(record.detail or "", SITE, record.started_at)
    assert abs(since - idle.start) <= timedelta(minutes=1), (since, idle.start)  # its minute
