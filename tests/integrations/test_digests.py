"""The daily digest: turned on per user, sent once a day through a real aiosmtpd, with the
user's reservations today and tomorrow, GPUs left idle yesterday and violations on them.
The run is triggered directly at a chosen instant (tomorrow 07:30 in the site's zone)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.model.violations import Violation
from jupyter_gpuhive.store.usage import GpuReading
from tests.conftest import book
from tests.protection.conftest import Mailbox

WARSAW = ZoneInfo("Europe/Warsaw")  # the site zone of the test configuration


@pytest.fixture
def hive_config(hive_config: dict[str, Any], smtp_server: Mailbox) -> dict[str, Any]:
    return {
        **hive_config,
        "digest_hour": 7,
        "notify_email": {
            "host": "127.0.0.1",
            "port": smtp_server.port,
            "sender": "gpuhive@example.org",
            "address_template": "{user}@example.org",
        },
    }


def at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=WARSAW)


async def test_daily_digest_once_with_every_section(
    api: Any, jp_serverapp: Any, smtp_server: Mailbox
) -> None:
    alice, bob = api("alice"), api("bob")
    hive = jp_serverapp.web_app.settings["gpuhive"]
    digests = hive.integrations.digests
    today = datetime.now(WARSAW).date()
    run_day = today + timedelta(days=1)  # the digest runs "tomorrow" at 07:30 local
    run_at = at(run_day, 7, 30)

    assert (await alice("GET", "digest")).body == {
        "user": "alice", "enabled": False, "email": None, "last_sent": None,
    }  # fmt: skip
    on = await alice("PUT", "digest", {"enabled": True})
    assert on.status == 200 and on.body["enabled"] is True
    assert (await bob("PUT", "digest", {"enabled": True, "email": "bob@lab.example"})).status == 200
    # alice's bookings on the run day and the next (in the future); one on the day after: not shown
    first = (await book(alice, "morning run", ["gpu3:0"], at(run_day, 10))).body
    second = (
        await book(alice, "next day", ["gpu3:1", "gpu3:2"], at(run_day + timedelta(days=1), 9))
    ).body
    await book(alice, "too far", ["gpu3:3"], at(run_day + timedelta(days=2), 9))
    # "yesterday" for the run is today: a reservation there, left idle, and a violation on it
    store = hive.store
    gpu = store.inventory.gpu("gpu2:0")
    idle = store.reservations.create(alice_name := "alice", "idle one", "",
                                     at(today, 10), at(today, 11), [gpu.id])  # fmt: skip
    readings = [GpuReading(gpu.id, 600.0, 0.0, 10.0, frozenset())]
    store.usage.record(at(today, 10, 10), readings, [idle])
    busy_gpu = store.inventory.gpu("gpu2:1")
    busy = store.reservations.create(alice_name, "busy one", "", at(today, 12), at(today, 13),
                                     [busy_gpu.id])  # fmt: skip
    store.usage.record(at(today, 12, 10), [GpuReading(busy_gpu.id, 600.0, 90.0, 1000.0,
                                                     frozenset({"alice"}))], [busy])  # fmt: skip
    store.violations.sync(
        at(today, 10, 20),
        [Violation("foreign", "gpu2", "gpu2:0", gpu.uuid, "mallory", "alice", idle.id, 1,
                      (4242,), ("python steal.py",), None, at(today, 10, 20))],
        None, [],
    )  # fmt: skip

    assert digests.send_due(at(run_day, 6, 59)) == []  # before the digest hour: nothing
    assert smtp_server.messages == []
    assert sorted(digests.send_due(run_at)) == ["alice", "bob"]
    assert digests.send_due(run_at + timedelta(hours=3)) == []  # once a day
    by_to = {m["to"][0]: m["data"] for m in smtp_server.messages}
    assert set(by_to) == {"alice@example.org", "bob@lab.example"}
    text = by_to["alice@example.org"].replace("=\n", "")
    assert f"reservation {first['id']}" in text and f"reservation {second['id']}" in text
    assert "too far" not in text
    assert "morning run (gpu3:0;" in text and "next day (gpu3:1, gpu3:2;" in text
    assert f"Your GPUs on {run_day:%a %d %b}: 2 reservation(s)" in text  # the subject
    idle_part = text.split("left idle yesterday:")[1].split("Violations")[0]
    assert "idle one" in idle_part and "busy 0%" in idle_part and "busy one" not in idle_part
    violations = text.split("Violations on your GPUs yesterday:")[1]
    assert "foreign on gpu2:0 by mallory" in violations
    assert "python steal.py" not in text
    bobs = by_to["bob@lab.example"]
    assert bobs.count("  none") == 3
    assert (await alice("GET", "digest")).body["last_sent"] == run_day.isoformat()
    # turned off: no more digests
    assert (await alice("PUT", "digest", {"enabled": False})).status == 200
    assert digests.send_due(at(run_day + timedelta(days=1), 8)) == ["bob"]


async def test_digest_input_is_checked(api: Any) -> None:
    alice = api("alice")
    for body, status, words in (
        ({}, 422, "'enabled' is required"),  # missing: 422, as for every body
        ({"enabled": "yes"}, 400, "true or false"),
        ({"enabled": True, "email": "nope"}, 422, "e-mail"),
        ({"enabled": True, "when": "7"}, 400, "when"),
    ):
        reply = await alice("PUT", "digest", body)
        assert reply.status == status and words in reply.message, (body, reply)
