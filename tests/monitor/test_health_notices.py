"""Holders of a failed or drained GPU are told through the protection handlers (the Lab notice
on the event bus, mail where configured) and the `gpu.health` webhook event, each with the
earliest-slot finder's best alternative (issue #30, item 2's rest)."""

from __future__ import annotations

import email
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from jupyter_gpuhive.protection.handlers import EVENT_SCHEMA_ID
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import set_gpu_fault
from jupyter_gpuhive.sim.ports import free_port
from tests.conftest import book
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook
from tests.protection.conftest import Mailbox
from tests.support.waiting import until

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the simulated host"),
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    box = Mailbox(free_port())
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    yield box
    controller.stop()


@pytest.fixture
def sim(tmp_path: Path) -> LocalSimHost:
    return LocalSimHost("gpu1", tmp_path / "sim")


@pytest.fixture
def hive_config(sim: LocalSimHost, mailbox: Mailbox) -> dict[str, Any]:
    env = sim.env()
    return {
        "hosts": [{"name": "gpu1", "transport": "local", "env": {k: env[k] for k in SIM_ENV}}],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
        "webhook_backoff": 0.2,
        "webhook_allow_private": True,
        "health_handlers": ["event", "email"],
        "violation_handlers": {
            "email": {"port": mailbox.port, "host": "127.0.0.1", "sender": "hive@x.org",
                      "address_template": "{user}@x.org"},
        },
    }  # fmt: skip


def notices(seen: list[dict[str, Any]], holder: str) -> list[dict[str, Any]]:
    return [e for e in seen if e.get("kind") == "gpu-health" and e.get("holder") == holder]


@pytest.mark.parametrize("how", ["failed", "drained"])
async def test_holders_are_told_with_the_best_alternative(
    api, jp_serverapp, running_hive, sim, mailbox, how
):
    alice, boss = api("alice"), api("boss")
    await until(lambda: len(running_hive.store.inventory.host("gpu1").gpus) == 4, 20, "discovery")
    seen: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(data)

    jp_serverapp.event_logger.add_listener(schema_id=EVENT_SCHEMA_ID, listener=listener)
    now = running_hive.now()
    with receiving(Receiver()) as told:
        await add_hook(alice, told, events=["gpu.health"])
        held = await book(alice, "holds gpu1:1", ["gpu1:1"], now + timedelta(hours=2))
        if how == "failed":
            set_gpu_fault(sim.config_path, 1, "ecc")
        else:
            drained = await boss("POST", "health/drain", {"gpu": "gpu1:1", "reason": "fan swap"})
            assert drained.status == 200, drained
        [notice] = await until(lambda: notices(seen, "alice"), 30, "the Lab notice")
        words = "failed its health check" if how == "failed" else "drained for maintenance"
        message = notice["message"]
        assert f"GPU gpu1:1 of your reservation {held.body['id']}" in message and words in message
        assert "The earliest alternative: gpu1:" in message and "gpu1:1 from" not in message
        # people's words (#48): the site's clock, no ISO timestamps, no route names
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:", message), message
        assert "reservations/search" not in message and "%gpureserve" in message, message
        await told.until(1, timeout=15)
        event = told.new_events[-1]
        assert event["event"] == "gpu.health" and event["data"]["gpu"] == "gpu1:1"
        [offer] = event["data"]["alternatives"]
        assert offer["reservation"] == held.body["id"] and len(offer["gpus"]) == 1
        assert offer["gpus"][0] != "gpu1:1" and offer["gpus"][0] in message
        assert "The earliest alternative" in event["text"]
    mails = await until(lambda: [m for m in mailbox.messages if m["to"] == ["alice@x.org"]],
                        15, "the mail")  # fmt: skip
    payload = email.message_from_string(mails[0]["data"]).get_payload(decode=True)
    body = payload.decode() if isinstance(payload, bytes) else str(payload)
    assert "GPU gpu1:1 of your reservation" in body and "The earliest alternative" in body
    # Recovery closes the notice; nobody else heard about alice's reservation.
    if how == "failed":
        set_gpu_fault(sim.config_path, 1, None)
    else:
        back = await boss("POST", "health/drain", {"gpu": "gpu1:1", "drain": False})
        assert back.status == 200, back

    async def closed() -> bool:
        reply = await alice("GET", "violations")
        mine = [v for v in reply.body["violations"] if v["kind"] == "gpu-health"]
        return bool(mine) and not any(v["ongoing"] for v in mine)

    await until(closed, 30, "the notice closed")
    assert len(notices(seen, "alice")) == 1 and not [e for e in seen if e.get("holder") == "bob"]
