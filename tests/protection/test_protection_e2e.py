"""End to end on real sshd hosts: B runs on A's reserved GPU; B is told, mailed, then stopped."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive.protection.service import ProtectionSettings
from jupyter_gpuhive.sim.cluster import SshdCluster, start_gpu_process
from tests.hosts.helpers import host_decls, needs_sshd, settings_for
from tests.protection.conftest import USER_MAP, tty_count
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as test users")

# Ignores SIGINT but notes it, so the test sees SIGINT arrive first and SIGKILL end it.
STUBBORN = (
    "import signal, sys, time\n"
    "def note(*_):\n"
    "    open(sys.argv[1], 'a').write('INT\\n')\n"
    "signal.signal(signal.SIGINT, note)\n"
    "while True: time.sleep(1)\n"
)


@pytest.fixture
def marks() -> Iterator[Path]:
    """A directory every test user may write to."""
    path = Path(tempfile.mkdtemp(prefix="gpuhive-prot-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_offender_is_warned_mailed_and_killed_holder_untouched(
    sim_users, make_rig, open_terminal, smtp_server, gpu_processes, marks
) -> None:
    needs_sshd()
    name = f"pt{uuid.uuid4().hex[:6]}"
    with SshdCluster([name]) as cluster:
        for user in sim_users:
            cluster.add_user(user)
        settings = ProtectionSettings(
            level=1,
            user_map=USER_MAP,
            ladder=[
                {"after": 0, "handler": "terminal"},
                {"after": 0, "handler": "email"},
                {"after": 0, "handler": "event"},
                {"after": 1.5, "handler": "kill", "signal": "INT"},
                {"after": 3.5, "handler": "kill", "signal": "KILL"},
            ],
            handlers={
                "email": {
                    "host": "127.0.0.1",
                    "port": smtp_server.port,
                    "sender": "gpuhive@example.org",
                    "address_template": "{user}@example.org",
                    "admins": ["admin@example.org"],
                },
                "kill": {"mode": "user"},
            },
        )
        decls = host_decls(cluster, [name], "root")
        rig = make_rig(decls, settings, settings_for(cluster), interval=1.0)
        await rig.sweep()  # discovery fills the inventory
        booked = await asyncio.to_thread(rig.reserve, "alice", f"{name}:1")

        alice_tty = open_terminal("gh-alice")
        bob_ttys = [open_terminal("gh-bob"), open_terminal("gh-bob")]
        await until(lambda: tty_count("gh-bob") >= 2 and tty_count("gh-alice") >= 1, timeout=15)
        alice_proc = start_gpu_process(name, [1], user="gh-alice")
        gpu_processes.append(alice_proc)
        marker = marks / "bob.signals"
        bob_proc = start_gpu_process(
            name, [1], user="gh-bob", command=["/usr/bin/python3", "-c", STUBBORN, str(marker)]
        )
        gpu_processes.append(bob_proc)

        rig.monitor.start()
        try:
            # B's every terminal shows the warning, naming the GPU and the holder.
            for tty in bob_ttys:
                text = await until(lambda t=tty: "EOF" in t.read() and t.read(), timeout=15)
                assert f"GPU {name}:1" in text
                assert "reserved by alice" in text
                assert str(bob_proc.pid) in text

            # The e-mail reaches the real SMTP server, to B and the admins.
            mail = await until(lambda: smtp_server.messages and smtp_server.messages[0], timeout=15)
            assert set(mail["to"]) == {"gh-bob@example.org", "admin@example.org"}
            assert f"{name}:1" in mail["data"] and "alice" in mail["data"]
            assert f"{booked.end:%Y-%m-%d %H:%M}" in mail["data"]

            # The holder's UI gets an event to toast.
            event = await until(lambda: rig.events and rig.events[0], timeout=15)
            assert event["holder"] == "alice" and event["offender"] == "gh-bob"

            # SIGINT first (ignored by this process), then SIGKILL ends it.
            await until(lambda: marker.exists() and "INT" in marker.read_text(), timeout=15)
            assert bob_proc.poll() is None
            await until(lambda: bob_proc.poll() is not None, timeout=15)
            assert bob_proc.returncode == -signal.SIGKILL

            # The violation ends with the process, and the history has every action.
            record = await until(
                lambda: [v for v in rig.history() if v.ended_at and len(v.actions) >= 5], timeout=15
            )
        finally:
            await rig.monitor.stop()
            await rig.protection.drain()

        # Nothing happened to A: A's process lives on, A's terminal stayed silent.
        assert alice_proc.poll() is None
        assert alice_tty.read() == ""
        assert len(smtp_server.messages) == 1  # one e-mail per interval, not per sweep

        (violation,) = record
        assert violation.kind == "foreign"
        assert (violation.offender, violation.holder) == ("gh-bob", "alice")
        assert violation.reservation_id == booked.id
        assert violation.pids == (bob_proc.pid,)
        done = [(a.handler, a.outcome, a.step) for a in violation.actions]
        assert sorted(done) == [
            ("email", "ok", 1),
            ("event", "ok", 2),
            ("kill", "ok", 3),
            ("kill", "ok", 4),
            ("terminal", "ok", 0),
        ]
        kills = [a.detail for a in violation.actions if a.handler == "kill"]
        assert any("SIGINT sent" in d for d in kills) and any("SIGKILL sent" in d for d in kills)
        terminal = next(a for a in violation.actions if a.handler == "terminal")
        assert terminal.detail.count("pts/") == 2
        per_res = rig.store.violations.for_reservation(booked.id)
        assert [v.id for v in per_res] == [violation.id]
