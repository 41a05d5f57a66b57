"""The webhook courier: delivery runs in its own process, which the server never waits for."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.integrations.webhooks import Webhooks, WebhookSettings
from jupyter_gpuhive.model.core import Identity
from jupyter_gpuhive.model.requests import WebhookRequest
from jupyter_gpuhive.server.http_transport import TornadoTransport
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.integrations import Integrations as Rows
from jupyter_gpuhive.store.webhooks import Webhook
from tests.integrations.receiver import Receiver, receiving


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Service:
    """Webhooks over a store of their own, as the server builds them."""

    rows: Rows
    webhooks: Webhooks

    def hook(self, receiver: Receiver, owner: str = "alice") -> Webhook:
        """An endpoint stored directly (the API's checks are tested elsewhere)."""
        receiver.secret = f"whsec_{owner}"
        events = ["reservation.created"]
        return self.rows.add_webhook(
            owner, False, receiver.url, receiver.secret, "json", events, now()
        )

    async def emit(self, text: str) -> int:
        return await self.webhooks.emit("reservation.created", {"n": text}, ["alice"], text)

    async def log(self, hook: Webhook) -> list[Any]:
        await self.webhooks.flush()
        return await asyncio.to_thread(self.rows.deliveries, hook.id, None, 100)

    def pid(self) -> int:
        process = self.webhooks.courier._process
        assert process is not None and process.returncode is None
        return process.pid


@pytest.fixture
def service(tmp_path: Path, jp_asyncio_loop: asyncio.AbstractEventLoop) -> Iterator[Service]:
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}")
    store.open()
    rows = Rows(store.db)

    async def run(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    settings = WebhookSettings(timeout=1.0, backoff=0.2, max_attempts=2, allow_private=True)
    webhooks = Webhooks(rows, settings, run, now, TornadoTransport)
    try:
        yield Service(rows, webhooks)
    finally:
        jp_asyncio_loop.run_until_complete(webhooks.stop())
        store.close()


async def test_delivery_runs_in_its_own_process_and_a_frozen_one_delays_no_event(
    service: Service,
) -> None:
    with receiving(Receiver()) as healthy:
        hook = service.hook(healthy)
        assert await service.emit("first") == 1
        await healthy.until(1)
        courier = service.pid()
        assert courier != os.getpid()
        os.kill(courier, signal.SIGSTOP)  # a courier that does nothing at all
        try:
            began = time.monotonic()
            for i in range(50):
                assert await service.emit(f"while frozen {i}") == 1
            handing_over = time.monotonic() - began
            await asyncio.sleep(0.5)
            assert len(healthy.new_events) == 1  # nothing in this process delivered them
        finally:
            os.kill(courier, signal.SIGCONT)
        assert handing_over < 0.5, handing_over  # the server only hands events over
        await healthy.until(51)
        assert all(r.signed and r.fresh for r in healthy.requests)
        delivered = await service.log(hook)
        assert len(delivered) == 51 and {d.state for d in delivered} == {"delivered"}
        assert all(len(d.log) == 1 and d.log[0]["status"] == 200 for d in delivered)


async def test_a_courier_that_died_is_started_again(service: Service) -> None:
    with receiving(Receiver()) as healthy:
        hook = service.hook(healthy)
        await service.emit("before")
        await healthy.until(1)
        first = service.pid()
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while service.webhooks.courier.running:  # the server notices the end of its pipe
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert await service.emit("after") == 1
        await healthy.until(2)
        assert service.pid() != first
        assert [e["text"] for e in healthy.new_events] == ["before", "after"]
        assert {d.state for d in await service.log(hook)} == {"delivered"}


async def test_stop_ends_the_process_and_leaves_unfinished_deliveries_pending(
    service: Service,
) -> None:
    with receiving(Receiver(hang=True)) as hanging, receiving(Receiver()) as healthy:
        stuck, fine = service.hook(hanging, "alice"), service.hook(healthy, "alice")
        assert await service.emit("one") == 2
        await healthy.until(1)
        deadline = time.monotonic() + 5
        while not hanging.hung:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        process = service.webhooks.courier._process
        assert process is not None
        began = time.monotonic()
        await service.webhooks.stop()
        assert time.monotonic() - began < 5  # the hanging attempt is cancelled, not awaited
        assert process.returncode == 0
        assert await service.emit("after stop") == 0  # nothing is handed to a stopped courier
        rows = service.rows
        (pending,) = await asyncio.to_thread(rows.deliveries, stuck.id, None, 10)
        assert pending.state == "pending" and pending.log == []
        (done,) = await asyncio.to_thread(rows.deliveries, fine.id, None, 10)
        assert done.state == "delivered" and done.attempts == 1
        hanging.release.set()


async def test_an_endpoint_added_while_the_list_is_being_read_still_gets_events(
    service: Service,
) -> None:
    """The list read for an event that overtook an add must not be kept as the cache."""
    webhooks = service.webhooks
    plain_run = webhooks.run
    read_done, go_on = asyncio.Event(), asyncio.Event()

    async def slow_reads(fn: Any, *args: Any) -> Any:
        result = await plain_run(fn, *args)
        if fn == service.rows.webhooks and not go_on.is_set():
            read_done.set()  # the old list (no endpoint yet) is read; hold it back
            await go_on.wait()
        return result

    webhooks.run = slow_reads
    with receiving(Receiver()) as hook:
        early = asyncio.create_task(service.emit("before the endpoint existed"))
        await read_done.wait()
        added = await webhooks.add(
            Identity("alice"), WebhookRequest(hook.url, events=("reservation.created",))
        )
        go_on.set()
        assert await early == 1  # the overtaken read is done again, and finds the endpoint
        hook.secret = added["secret"]
        assert [w.id for w in await webhooks.endpoints()] == [added["id"]]
        assert await service.emit("after") == 1
        await hook.until(2)
        assert {e["data"]["n"] for e in hook.new_events} == {"before the endpoint existed", "after"}
        assert all(r.signed for r in hook.requests)
