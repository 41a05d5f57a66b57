"""Budget warnings (#46 item 3) by a real server: at 80 % and 100 % a budget's people hear it
once per threshold and period, in the Lab, by e-mail (a real SMTP server) and as the webhook
event budget.warning (a real HTTP receiver)."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_gpuhive.integrations.subscriptions import AVAILABILITY_SCHEMA_ID
from tests.conftest import book, soon
from tests.fairshare.test_budgets_api import add_budget, around_today
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook
from tests.protection import conftest as mailing
from tests.protection.conftest import Mailbox
from tests.support.waiting import until

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
smtp_server = mailing.smtp_server  # a real SMTP server (aiosmtpd)


@pytest.fixture
def hive_config(hive_config: dict[str, Any], smtp_server: Mailbox) -> dict[str, Any]:
    mail = {"host": "127.0.0.1", "port": smtp_server.port, "sender": "gpuhive@example.org",
            "address_template": "{user}@example.org"}  # fmt: skip
    return {**hive_config, "notify_email": mail, "webhook_allow_private": True}


async def test_members_hear_each_threshold_once_on_every_channel(
    api: Any, jp_serverapp: Any, smtp_server: Mailbox
) -> None:
    boss, alice, bob = api("boss"), api("alice"), api("bob")
    hive = jp_serverapp.web_app.settings["gpuhive"]
    notices: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        notices.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=AVAILABILITY_SCHEMA_ID, listener=listen)
    assert (await bob("GET", "me")).status == 200  # gpuhive knows bob is in phd
    budget = await add_budget(boss, scope="group", name="phd", gpu_hours=5, **around_today())
    tick = hive.fairshare.budgets.tick
    with receiving(Receiver()) as hers:
        await add_hook(alice, hers, events=["budget.warning"])
        await book(alice, "most of it", ["gpu1:0", "gpu1:1"], soon(hours=2), "2h")  # 80 %
        await tick(hive.now())
        await hers.until(1)
        event = hers.new_events[0]
        assert event["event"] == "budget.warning" and event["data"]["threshold"] == 80
        assert event["data"]["standing"]["budget"]["id"] == budget["id"]
        assert event["text"].startswith("The budget of group phd for ")
        assert "reached 80 %: 4.00 of 5.00 GPU-hours used or booked" in event["text"]
        await until(lambda: {n["user"] for n in notices} == {"alice", "bob"})
        await until(lambda: len(smtp_server.messages) == 2)
        assert sorted(m["to"][0] for m in smtp_server.messages) == [
            "alice@example.org",
            "bob@example.org",
        ]
        assert all(n["offer"] == {"budget": budget["id"], "threshold": 80} for n in notices)
        await tick(hive.now())  # nothing new: each threshold once
        await book(bob, "the rest", ["gpu1:2"], soon(hours=2), "1h")  # 100 %
        await tick(hive.now())
        await hers.until(2)
        assert hers.new_events[1]["data"]["threshold"] == 100
        assert "is spent" in hers.new_events[1]["text"]
        await until(lambda: len(notices) == 4)
        await tick(hive.now())
    assert len(hers.new_events) == 2 and len(notices) == 4
    assert "[gpuhive] The budget of group phd is spent" in smtp_server.messages[-1]["data"]
