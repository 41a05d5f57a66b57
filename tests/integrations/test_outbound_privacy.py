"""One privacy rule for what leaves the server (issue #27, finding 5): a site webhook, which
anyone may read, carries what any signed-in user may see (no private descriptions unless
public_descriptions), like a site feed; a user's own endpoint and feed carry their view."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import iso, soon
from tests.integrations.helpers import fetch, new_feed, parse_strictly, token_of
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook

SECRET = "secret plan: the grant deadline"


@pytest.fixture
def privacy() -> dict[str, Any]:
    """GpuHiveApp privacy traits of the server under test (parametrized per test)."""
    return {}


@pytest.fixture
def hive_config(hive_config: dict[str, Any], privacy: dict[str, Any]) -> dict[str, Any]:
    return {
        **hive_config,
        **privacy,
        "webhook_backoff": 0.2,
        "webhook_allow_private": True,  # the receivers listen on 127.0.0.1
    }


async def book_privately(alice: Any, days: int) -> dict[str, Any]:
    made = await alice(
        "POST", "reservations",
        {"title": "on gpu3", "description": SECRET, "gpus": ["gpu3:1"],
         "start": iso(soon(days=days)), "duration": "1h"},
    )  # fmt: skip
    assert made.status == 201, made
    return dict(made.body)


async def test_site_webhooks_and_feeds_leave_private_descriptions_out(api: Any) -> None:
    alice, boss, anonymous = api("alice"), api("boss"), api(None)
    with receiving(Receiver()) as mine, receiving(Receiver()) as site:
        await add_hook(alice, mine, events=["reservation.created", "reservation.changed"])
        await add_hook(boss, site, events=["reservation.created", "reservation.changed"], site=True)
        made = await book_privately(alice, days=8)
        changed = await alice("PATCH", f"reservations/{made['id']}", {"title": "renamed"})
        assert changed.status == 200, changed
        await site.until(2, timeout=10)
        await mine.until(2, timeout=10)

        for event in site.new_events:
            shown = event["data"]["reservation"]
            assert shown["id"] == made["id"] and shown["owner"] == "alice"
            assert "description" not in shown
        assert SECRET not in str(site.requests)  # nowhere in what reached the site endpoint
        for event in mine.new_events:  # the owner's own endpoint: the owner's view
            assert event["data"]["reservation"]["description"] == SECRET
        assert {e["id"] for e in mine.new_events} == {e["id"] for e in site.new_events}

    site_feed = await boss("POST", "feeds/site", {"host": "gpu3"})
    assert site_feed.status == 201, site_feed
    text = (await fetch(anonymous, token_of(site_feed.body["url"]))).body
    assert "renamed" in text and "secret plan" not in text
    (own,) = parse_strictly((await fetch(anonymous, await new_feed(alice))).body).values()
    assert "secret plan" in str(own["description"])


@pytest.mark.parametrize("privacy", [{"public_descriptions": True}])
async def test_with_public_descriptions_the_site_webhook_carries_them(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    with receiving(Receiver()) as site:
        await add_hook(boss, site, events=["reservation.created"], site=True)
        await book_privately(alice, days=9)
        await site.until(1, timeout=10)
        (event,) = site.new_events
        assert event["data"]["reservation"]["description"] == SECRET
