"""Handlers: failures are isolated and recorded; misconfiguration fails at construction."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.protection.handlers import (
    EVENT_SCHEMA,
    EVENT_SCHEMA_ID,
    HandlerConfigError,
    HandlerContext,
    HandlerFailed,
    build_handlers,
)
from jupyter_gpuhive.protection.service import Protection, ProtectionSettings
from jupyter_gpuhive.server.http_transport import TornadoTransport
from jupyter_gpuhive.sim.cluster import start_gpu_process
from jupyter_gpuhive.sim.ports import free_port
from tests.protection.conftest import USER_MAP, local_decl
from tests.support.waiting import until

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")


@needs_root
async def test_failing_handlers_never_stop_the_others(
    sim_users, make_local_host, make_rig, webhook_server, gpu_processes
) -> None:
    host = make_local_host()
    settings = ProtectionSettings(
        user_map=USER_MAP,
        ladder=[
            {"after": 0, "handler": "terminal"},  # bob has no terminal: fails
            {"after": 0, "handler": "email"},  # SMTP is down: fails
            {"after": 0, "handler": "webhook"},
            {"after": 0, "handler": "event"},
            {"after": 0.5, "handler": "kill-sudo"},  # sudo as nobody (or no sudo): fails
            {"after": 1.0, "handler": "kill", "signal": "TERM"},
        ],
        handlers={
            "email": {"port": free_port(), "sender": "hive@x.org", "to_offender": False,
                      "admins": ["admin@x.org"], "timeout": 3},
            "webhook": {"url": webhook_server.url},
            # A real refusal on any machine: with sudo installed, nobody may not signal bob's
            # process; without it, the command is missing.
            "kill-sudo": {"type": "kill", "mode": "sudo", "sudo": "sudo -n -u nobody"},
        },
    )  # fmt: skip
    rig = make_rig([local_decl(host)], settings, interval=0.3, http=TornadoTransport)
    await rig.sweep()
    rig.reserve("alice", f"{host.name}:0")
    bob = start_gpu_process(host.name, [0], user="gh-bob")
    gpu_processes.append(bob)
    rig.monitor.start()
    await until(lambda: bob.poll() is not None, timeout=15)
    assert bob.returncode == -signal.SIGTERM
    (violation,) = await until(
        lambda: [v for v in rig.history() if v.ended_at and len(v.actions) == 6], timeout=15
    )
    outcomes = {a.handler: (a.outcome, a.detail) for a in violation.actions}
    assert outcomes["terminal"] == ("failed", f"gh-bob has no terminal on {host.name}")
    assert outcomes["email"][0] == "failed" and "SMTP" in outcomes["email"][1]
    assert outcomes["kill-sudo"][0] == "failed" and "sudo refused" in outcomes["kill-sudo"][1]
    assert outcomes["webhook"] == ("ok", f"POST {webhook_server.url}: 200")
    assert outcomes["event"][0] == "ok"
    assert outcomes["kill"] == ("ok", f"SIGTERM sent to {bob.pid}")
    # The monitor carried on: the violation was seen to end after the kill.
    body = webhook_server.bodies[0]
    assert body["text"].startswith("gpuhive: ") and f"{host.name}:0" in body["text"]
    assert body["violation"]["offender"] == "gh-bob"


@needs_root
async def test_kill_of_a_process_already_gone_is_a_recorded_failure(
    sim_users, make_local_host, make_rig, gpu_processes
) -> None:
    host = make_local_host()
    # The ladder's kill is far off: the test calls the handler itself once the process is gone.
    ladder = [{"after": 3600, "handler": "kill"}]
    rig = make_rig([local_decl(host)], ProtectionSettings(user_map=USER_MAP, ladder=ladder))
    handler = rig.protection.handlers["kill"]
    await rig.sweep()
    rig.reserve("alice", f"{host.name}:0")
    bob = start_gpu_process(host.name, [0], user="gh-bob")
    gpu_processes.append(bob)
    await rig.sweep()
    (case,) = rig.protection.escalation.cases.values()
    os.kill(bob.pid, signal.SIGKILL)
    bob.wait()
    with pytest.raises(HandlerFailed, match="already gone"):
        await handler.handle(case.incident, {})


def test_event_schema_validates_what_the_event_handler_publishes() -> None:
    from jupyter_events import EventLogger

    logger = EventLogger()
    logger.register_event_schema(EVENT_SCHEMA)
    from jupyter_gpuhive.protection.handlers import SAMPLE

    logger.schemas.validate_event(EVENT_SCHEMA_ID, {**SAMPLE.to_json(), "message": "m"})


# --- configuration errors -------------------------------------------------------------------


def make(store: Any, **kwargs: Any) -> Protection:
    return Protection(
        ProtectionSettings(**kwargs), store, None, _never, publish=print, http=TornadoTransport
    )


async def _never(*_: Any, **__: Any) -> Any:
    raise AssertionError("no blocking work expected")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ladder": [{"after": 0, "handler": "pager"}]}, "unknown type 'pager'"),
        ({"ladder": [{"after": -1, "handler": "terminal"}]}, "'after' must be seconds"),
        ({"ladder": [{"after": 0}]}, "names no 'handler'"),
        ({"ladder": "terminal"}, "must be a list of steps"),
        ({"ladder": [{"handler": "email"}]}, "needs the 'sender' option"),
        (
            {"ladder": [{"handler": "email"}], "handlers": {"email": {"sender": "a@b"}}},
            "cannot reach offenders",
        ),
        (
            {
                "ladder": [{"handler": "email"}],
                "handlers": {
                    "email": {
                        "sender": "a@b",
                        "to_offender": False,
                        "admins": ["x"],
                        "subject": "{nope}",
                    }
                },
            },
            "'subject' is not valid",
        ),
        ({"ladder": [{"handler": "kill", "signal": "BOOM"}]}, "signal must be one of"),
        ({"ladder": [{"handler": "kill", "sginal": "INT"}]}, "unknown option"),
        ({"handlers": {"kill": {"mode": "root"}}}, "'mode' must be one of"),
        ({"handlers": {"terminal": {"intervall": 5}}}, "unknown option"),
        ({"handlers": {"webhook": {"url": "ftp://x"}}}, "must start with http"),
        ({"handlers": {"terminal": {"kinds": ["ghost"]}}}, "cannot act on"),
        ({"level": 5}, "level must be"),
        ({"allow_commands": ["("]}, "pattern"),
    ],
)
def test_misconfigured_handlers_fail_at_construction(store, kwargs, message) -> None:
    with pytest.raises(HandlerConfigError, match=message.replace("(", r"\(")):
        make(store, **kwargs)


def test_event_handler_needs_a_publisher(store) -> None:
    settings = ProtectionSettings(ladder=[{"after": 0, "handler": "event"}])
    with pytest.raises(HandlerConfigError, match="needs an event publisher"):
        Protection(settings, store, None, _never)


def test_one_type_serves_two_named_handlers(store) -> None:
    p = make(
        store,
        ladder=[{"handler": "mail-user"}, {"after": 60, "handler": "mail-admins"}],
        handlers={
            "mail-user": {"type": "email", "sender": "h@x", "address_template": "{user}@x"},
            "mail-admins": {"type": "email", "sender": "h@x", "to_offender": False,
                            "admins": ["root@x"], "interval": 3600},
        },
    )  # fmt: skip
    assert p.handlers["mail-admins"].interval == 3600
    assert [s.handler for s in p.ladder] == ["mail-user", "mail-admins"]


async def test_third_party_handler_from_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gh_pager.py").write_text(
        textwrap.dedent(
            """
            from jupyter_gpuhive.protection.handlers import ViolationHandler

            CALLS = []

            class Pager(ViolationHandler):
                def configure(self, opts):
                    self.channel = opts.text("channel", required=True)

                async def handle(self, incident, step):
                    CALLS.append((self.channel, incident.gpu))
                    return "paged"
            """
        )
    )
    info = tmp_path / "gh_pager-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gh-pager\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[jupyter_gpuhive.violation_handlers]\npager = gh_pager:Pager\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(HandlerConfigError, match="needs the 'channel' option"):
        build_handlers({}, HandlerContext(), ["pager"])
    built = build_handlers({"pager": {"channel": "#gpus"}}, HandlerContext())
    from jupyter_gpuhive.protection.handlers import SAMPLE

    assert await built["pager"].handle(SAMPLE, {}) == "paged"
    assert sys.modules["gh_pager"].CALLS == [("#gpus", "gpu1:0")]


@needs_root
async def test_messages_give_times_on_the_sites_clock(
    sim_users, make_local_host, make_rig, gpu_processes
) -> None:
    """A message template's {end} and {since} read on the site's clock, with its zone's name
    (they were UTC whatever the site), while the event's JSON keeps ISO instants."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo("America/New_York")
    host = make_local_host()
    settings = ProtectionSettings(
        user_map=USER_MAP,
        ladder=[{"after": 0, "handler": "event", "message": "until {end}; since {since}"}],
    )
    rig = make_rig([local_decl(host)], settings, interval=0.3, zone=zone)
    await rig.sweep()
    held = rig.reserve("alice", f"{host.name}:0")
    bob = start_gpu_process(host.name, [0], user="gh-bob")
    gpu_processes.append(bob)
    rig.monitor.start()
    (event,) = await until(lambda: [e for e in rig.events if e.get("message")], timeout=15)
    end = held.end.astimezone(zone)
    since = datetime.fromisoformat(event["since"]).astimezone(zone)
    assert event["message"] == (
        f"until {end:%Y-%m-%d %H:%M} {end.tzname()}; since {since:%Y-%m-%d %H:%M:%S} "
        f"{since.tzname()}"
    )
    assert end.tzname() in ("EST", "EDT") and "UTC" not in event["message"]
    assert datetime.fromisoformat(event["reservation_end"]) == held.end
