"""One writer of reservation state: every path that ends or changes a reservation goes through
the bookings service, so its webhook (`reservation.changed`, saying by whom and why) reaches a
real receiver and availability subscriptions are re-checked. Paths: a no-show release, an idle
reservation ended early, a limit change, an access-rule change, a kernel end policy's
extension, and an admin's edit."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.kernels.lifecycle import extender
from jupyter_gpuhive.sim.cluster import LocalSimHost
from tests.conftest import book, iso
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook
from tests.support.waiting import until

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
ALL = [f"gpu1:{i}" for i in range(4)]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the simulated host's processes"),
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]


@pytest.fixture
def protection() -> dict[str, Any]:
    """The protection traits of the server under test (parametrized per test)."""
    return {}


@pytest.fixture
def hive_config(tmp_path: Path, protection: dict[str, Any]) -> dict[str, Any]:
    env = LocalSimHost("gpu1", tmp_path / "sim").env()
    return {
        **protection,
        "hosts": [{"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
        "webhook_backoff": 0.2,
        "webhook_allow_private": True,  # the receivers listen on 127.0.0.1
    }


def changes(receiver: Receiver, rid: int) -> list[dict[str, Any]]:
    """The `reservation.changed` events the receiver got about reservation `rid`."""
    return [
        e for e in receiver.new_events
        if e["event"] == "reservation.changed" and e["data"]["reservation"]["id"] == rid
    ]  # fmt: skip


async def discovered(hive: Any) -> None:
    """Wait until the first sweeps found the simulated host's GPUs."""
    await until(lambda: len(hive.store.inventory.host("gpu1").gpus) == 4, 20, "discovery")


async def ended_by_protection(api: Any, hive: Any, reason: str) -> None:
    """Alice holds all of gpu1 from now and never uses it; protection ends it: her webhook
    hears who ended it and why, and bob's subscription for gpu1 fires (re-checked)."""
    alice, bob = api("alice"), api("bob")
    await discovered(hive)
    now = hive.now()
    with receiving(Receiver()) as mine, receiving(Receiver()) as offers:
        await add_hook(alice, mine, events=["reservation.changed"])
        await add_hook(bob, offers, events=["gpus.available"])
        held = await book(alice, "held", ALL, now, "1h")
        rid = held.body["id"]
        sub = await bob("POST", "subscriptions", {"gpus": 4, "host": "gpu1", "duration": "20m",
                                                  "deadline": iso(now + timedelta(minutes=40))})  # fmt: skip
        assert sub.status == 201, sub
        await until(lambda: changes(mine, rid), 30, f"reservation.changed ({reason})")
        await offers.until(1, timeout=15)
    (event,) = changes(mine, rid)
    data = event["data"]
    assert data["by"] == "protection" and data["reason"] == reason, data
    assert datetime.fromisoformat(data["reservation"]["end"]) <= hive.now()
    assert offers.new_events[0]["data"]["offer"]["host"] == "gpu1"


@pytest.mark.parametrize("protection", [{"noshow_after": "1s", "noshow_release_after": "1s"}])
async def test_a_no_show_release_is_a_changed_event_and_rechecks_subscriptions(
    api: Any, running_hive: Any
) -> None:
    await ended_by_protection(api, running_hive, "released: no-show")


@pytest.mark.parametrize(
    "protection", [{"idle_notify_after": "1s", "idle_end": True, "idle_end_after": "1s"}]
)
async def test_an_idle_end_is_a_changed_event_and_rechecks_subscriptions(
    api: Any, running_hive: Any
) -> None:
    await ended_by_protection(api, running_hive, "ended early: idle")


async def test_a_limit_change_that_flags_a_booking_is_a_changed_event(
    api: Any, running_hive: Any
) -> None:
    alice, boss = api("alice"), api("boss")
    await discovered(running_hive)
    start = datetime.now().astimezone().replace(microsecond=0) + timedelta(days=2)
    with receiving(Receiver()) as mine:
        await add_hook(alice, mine, events=["reservation.changed"])
        two = await book(alice, "two", ["gpu1:0", "gpu1:1"], start, "2h")
        rid = two.body["id"]
        limit = {"scope": "user", "name": "alice", "limits": {"gpus": 1}}
        assert (await boss("PUT", "limits", limit)).status == 200
        await until(lambda: changes(mine, rid), 15, "reservation.changed (limits)")
    (event,) = changes(mine, rid)
    data = event["data"]
    assert data["by"] == "boss" and data["reason"] == "flagged: limits changed", data
    assert data["reservation"]["flagged"] is True


async def test_an_access_rule_that_flags_a_booking_is_a_changed_event(
    api: Any, running_hive: Any
) -> None:
    alice, boss = api("alice"), api("boss")
    await discovered(running_hive)
    start = datetime.now().astimezone().replace(microsecond=0) + timedelta(days=2)
    with receiving(Receiver()) as mine:
        await add_hook(alice, mine, events=["reservation.changed"])
        made = await book(alice, "mine", ["gpu1:0"], start, "1h")
        rid = made.body["id"]
        staff_only = {"name": "staff only", "groups": ["staff"], "hosts": ["gpu1"]}
        assert (await boss("POST", "rules", staff_only)).status == 201
        await until(lambda: changes(mine, rid), 15, "reservation.changed (rules)")
    data = changes(mine, rid)[0]["data"]
    assert data["by"] == "boss" and data["reason"] == "flagged: access rules changed", data


async def test_a_kernel_end_policy_extension_and_an_admin_edit_say_who(
    api: Any, running_hive: Any
) -> None:
    hive, alice, boss = running_hive, api("alice"), api("boss")
    await discovered(hive)
    start = datetime.now().astimezone().replace(microsecond=0) + timedelta(days=1)
    with receiving(Receiver()) as mine:
        await add_hook(alice, mine, events=["reservation.changed"])
        made = await book(alice, "run", ["gpu1:3"], start, "1h")
        rid = made.body["id"]
        extend = extender(hive.bookings, hive.identities.identity_of, hive.run)  # the lifecycle's
        await extend("alice", rid, start + timedelta(hours=2))
        await until(lambda: changes(mine, rid), 15, "reservation.changed (extended)")
        edit = await boss("PATCH", f"reservations/{rid}", {"title": "renamed by an admin"})
        assert edit.status == 200, edit
        await until(lambda: len(changes(mine, rid)) == 2, 15, "reservation.changed (admin)")
    extended, edited = (e["data"] for e in changes(mine, rid))
    assert extended["by"] == "alice" and extended["reason"] == "extended: kernel end policy"
    assert extended["reservation"]["end"] == iso(start + timedelta(hours=2))
    assert edited["by"] == "boss" and edited["reason"] is None
