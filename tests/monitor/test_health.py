"""GPU health on a simulated host through a real server: each failure preset of the stand-in
gives the GPU its state; a failed GPU refuses bookings with the reason, is skipped by the
finder and the queue, its holder hears `gpu.health`; recovery brings it back. Admins drain."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import load_config, set_gpu_fault, write_config
from tests.conftest import book, iso
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook
from tests.support.waiting import until

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the simulated host"),
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]
# preset -> (state, words of the reason)
PRESETS = {
    "ecc": ("failed", "uncorrectable ECC"),
    "remapped": ("failed", "row remapping failed"),
    "lost": ("failed", "GPU is lost"),
    "xid": ("failed", "Unknown Error"),
    "retired": ("degraded", "pending retirement"),
    "thermal": ("degraded", "thermal slowdown"),
}


@pytest.fixture
def sim(tmp_path: Path) -> LocalSimHost:
    host = LocalSimHost("gpu1", tmp_path / "sim")
    config = load_config(host.config_path)
    config.driver_version = "590.48.01"  # knows remapped_rows.* in --query-gpu (535 does not)
    write_config(host.config_path, config)
    return host


@pytest.fixture
def hive_config(sim: LocalSimHost) -> dict[str, Any]:
    env = sim.env()
    return {
        "hosts": [{"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
        "webhook_backoff": 0.2,
        "webhook_allow_private": True,
    }


async def state_of(call: Any, ref: str) -> dict[str, Any]:
    reply = await call("GET", "health")
    assert reply.status == 200, reply
    return next(g for g in reply.body["gpus"] if g["gpu"] == ref)


async def discovered(hive: Any) -> None:
    await until(lambda: len(hive.store.inventory.host("gpu1").gpus) == 4, 20, "discovery")


@pytest.mark.parametrize("preset", list(PRESETS))
async def test_each_failure_preset(api, running_hive, sim, preset):
    alice, bob = api("alice"), api("bob")
    await discovered(running_hive)
    state, words = PRESETS[preset]
    now = running_hive.now()
    with receiving(Receiver()) as told:
        await add_hook(alice, told, events=["gpu.health"])
        held = await book(alice, "holds gpu1:1", ["gpu1:1"], now + timedelta(hours=2))
        set_gpu_fault(sim.config_path, 1, preset)

        async def judged() -> dict[str, Any] | None:
            found = await state_of(bob, "gpu1:1")
            return found if found["state"] == state else None

        found = await until(judged, 30, f"gpu1:1 {state} ({preset})")
        assert any(words in reason for reason in found["reasons"]), found
        await told.until(1, timeout=15)  # the holder hears it
        event = told.new_events[-1]
        assert event["event"] == "gpu.health" and event["data"]["gpu"] == "gpu1:1"
        assert event["data"]["state"] == state and event["data"]["reservations"] == [
            held.body["id"]
        ]
    later = now + timedelta(hours=5)
    body = {"title": "try", "gpus": ["gpu1:1"], "start": iso(later), "duration": "1h"}
    refused = await bob("POST", "reservations", body)
    if state == "failed":
        assert refused.status == 409, refused
        assert "gpu1:1 cannot be booked" in refused.message and words in refused.message
        assert refused.body["health"]["state"] == "failed"
        search = await bob(
            "POST", "reservations/search", {"count": 4, "duration": "1h", "host": "gpu1"}
        )
        assert search.status in (200, 409) and not (search.body or {}).get("slots"), search
        blocked = await until(lambda: _queue_blocker(running_hive), 10, "the queue's view")
        assert "cannot be booked" in blocked
    else:
        assert refused.status == 201, refused  # degraded: still bookable, shown
    set_gpu_fault(sim.config_path, 1, None)  # recovery

    async def recovered() -> bool:
        return (await state_of(bob, "gpu1:1"))["state"] == "ok"

    await until(recovered, 30, "recovery")
    if state == "failed":
        again = await bob("POST", "reservations", body)
        assert again.status == 201, again


def _queue_blocker(hive: Any) -> str | None:
    """The queue's reason not to give gpu1:1 to a job (its snapshot of the world)."""
    snap = hive.jobs.scheduler.snapshot(hive.now(), None)
    uuid = hive.store.inventory.gpu("gpu1:1").uuid
    return snap.gpus[uuid].blocker


async def test_admin_drains_and_undrains(api, running_hive):
    boss, alice = api("boss"), api("alice")
    await discovered(running_hive)
    start = running_hive.now() + timedelta(hours=3)
    body = {"title": "t", "gpus": ["gpu1:2"], "start": iso(start), "duration": "1h"}
    denied = await alice("POST", "health/drain", {"gpu": "gpu1:2"})
    assert denied.status == 403, denied
    # Who may drain, and that alice is not one: not a word about access rules (#41).
    assert "Only gpuhive admins may drain a GPU" in denied.message, denied.message
    assert "alice is not one" in denied.message and "access rule" not in denied.message
    bad = await boss("POST", "health/drain", {"gpu": "gpu9:9"})
    assert bad.status == 422 and "gpu9:9" in bad.message
    odd = await boss("POST", "health/drain", {"gpu": "gpu1:2", "drain": "yes"})
    assert odd.status in (400, 422) and "drain" in odd.message
    drained = await boss("POST", "health/drain", {"gpu": "gpu1:2", "reason": "fan swap"})
    assert drained.status == 200 and drained.body["drained"] is True, drained
    refused = await alice("POST", "reservations", body)
    assert refused.status == 409 and "drained for maintenance by boss: fan swap" in refused.message
    assert (await state_of(alice, "gpu1:2"))["bookable"] is False
    back = await boss("POST", "health/drain", {"gpu": "gpu1:2", "drain": False})
    assert back.status == 200 and back.body["drained"] is False
    assert (await alice("POST", "reservations", body)).status == 201
