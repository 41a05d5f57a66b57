"""Users' own webhooks cannot make the server POST into its own machine or network."""

from __future__ import annotations

import asyncio
import socket
from datetime import datetime, timezone
from typing import Any

import pytest

from jupyter_gpuhive.integrations.addresses import NotSent, PinnedResolver
from jupyter_gpuhive.integrations.webhooks import Webhooks, WebhookSettings, public_only
from jupyter_gpuhive.server.http_transport import TornadoTransport
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.integrations import Integrations as Rows
from tests.integrations.receiver import Receiver, receiving
from tests.support.waiting import until

INTERNAL = [
    "http://127.0.0.1:9/x",
    "http://localhost:9/x",
    "http://[::1]:9/x",
    "http://10.1.2.3/x",
    "http://192.168.0.1/x",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata
    "http://0.0.0.0:9/x",
]


@pytest.mark.parametrize("url", INTERNAL)
async def test_public_only_names_the_internal_address(url: str) -> None:
    problem = await public_only(url)
    assert problem is not None and "loopback, private or link-local" in problem


async def test_public_only_accepts_a_public_address_and_refuses_unknown_names() -> None:
    assert await public_only("https://93.184.215.14/hook") is None  # a literal global address
    assert "cannot be resolved" in (await public_only("http://no-such-host.invalid/x") or "")


async def test_users_are_refused_internal_urls_admins_may_add_site_hooks(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    for url in INTERNAL:
        refused = await alice("POST", "webhooks", {"url": url})
        assert refused.status == 422, refused
        assert "public addresses" in refused.message and "webhook_allow_private" in refused.message
    assert (await alice("GET", "webhooks")).body == {"webhooks": []}  # nothing was stored
    # An admin's personal endpoint is held to the same rule; a site endpoint is the admin's call.
    assert (await boss("POST", "webhooks", {"url": INTERNAL[0]})).status == 422
    site = await boss("POST", "webhooks", {"url": INTERNAL[0], "site": True})
    assert site.status == 201, site


async def test_a_stored_endpoint_that_now_points_inside_is_not_sent_to(tmp_path: Any) -> None:
    """Checked before every attempt too: a name may resolve elsewhere later than at creation."""
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}")
    store.open()
    rows = Rows(store.db)
    loop = asyncio.get_running_loop()

    async def run(fn: Any, *args: Any) -> Any:
        return await loop.run_in_executor(None, fn, *args)

    def now() -> datetime:
        return datetime.now(timezone.utc)

    with receiving(Receiver()) as inside:
        # As if it had been added while the address was public (stored directly).
        hook = rows.add_webhook(
            "alice", False, inside.url, "whsec_x", "json", ["reservation.created"], now()
        )
        service = Webhooks(rows, WebhookSettings(max_attempts=1), run, now, TornadoTransport)
        try:
            assert await service.emit("reservation.created", {}, ["alice"], "booked") == 1

            async def settled() -> Any:
                await service.flush()
                (delivery,) = await run(rows.deliveries, hook.id, None, 10)
                return delivery if delivery.state != "pending" else None

            delivery = await until(settled, timeout=10, what="the delivery's end", interval=0.05)
            assert delivery.state == "dead"
            assert delivery.attempts == 1
            assert "loopback, private or link-local" in (delivery.log[0]["error"] or "")
            assert inside.requests == []
        finally:
            await service.stop()
            store.close()


async def test_deliveries_connect_only_to_the_addresses_checked() -> None:
    """The HTTP client's resolver gives only checked addresses: no second lookup to rebind."""
    mine = PinnedResolver(timeout=5.0, public_only=True)  # a user's own endpoint
    for host in ("localhost", "127.0.0.1", "169.254.169.254"):
        with pytest.raises(NotSent, match="loopback, private or link-local"):
            await mine.resolve(host, 80)
    with pytest.raises(NotSent, match="cannot be resolved"):
        await mine.resolve("no-such-host.invalid", 80)
    site = PinnedResolver(timeout=5.0, public_only=False)  # an admin's site endpoint
    assert await site.resolve("127.0.0.1", 8080) == [(socket.AF_INET, ("127.0.0.1", 8080))]
    assert await site.resolve("127.0.0.1", 8080, socket.AF_INET6) == []
    first = await site.addresses("127.0.0.1", 8080)
    assert await site.addresses("127.0.0.1", 8080) is first  # looked up once per RESOLVE_TTL
