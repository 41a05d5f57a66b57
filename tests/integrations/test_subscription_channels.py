"""A subscription names only the channels that reach its owner here (issue #28, item 8): with no
mail set up and no webhook, the Lab alone; asking for e-mail then is a 422 that says why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "webhook_allow_private": True}  # the receiver listens on 127.0.0.1


async def test_default_channels_are_those_configured_and_a_missing_one_is_a_clear_422(
    api: Any,
) -> None:
    alice = api("alice")
    made = await alice("POST", "subscriptions", {"gpus": 1, "duration": "1h"})
    assert made.status == 201, made
    assert made.body["channels"] == ["lab"]

    refused = await alice("POST", "subscriptions", {"duration": "1h", "channels": ["email"]})
    assert refused.status == 422, refused
    assert refused.message == (
        "Cannot tell you by email: this server sends no e-mail (c.GpuHiveApp.notify_email)."
    )
    refused = await alice("POST", "subscriptions", {"duration": "1h", "channels": ["webhook"]})
    assert refused.status == 422
    assert "you have no webhook for the event gpus.available" in refused.message

    with receiving(Receiver()) as hook:
        await add_hook(alice, hook, events=["gpus.available"])
        made = await alice("POST", "subscriptions", {"duration": "1h"})
        assert made.body["channels"] == ["lab", "webhook"]
