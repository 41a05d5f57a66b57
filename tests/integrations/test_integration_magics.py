"""%gpufeed and %gpureserve --notify in a real IPython shell against a real server process."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from tests.conftest import HOSTS, TOKENS, USERS
from tests.support.server import Client, JupyterServer, magics_shell
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    root = tmp_path_factory.mktemp("feedmagics")
    config = {
        "db_url": f"sqlite:///{root / 'hive.sqlite'}",
        "hosts": HOSTS,
        "monitor": False,
        "site_timezone": "UTC",
        "min_reservation": "10m",
    }
    srv = JupyterServer(config, USERS)
    yield srv
    srv.stop()


@pytest.fixture
def shell(server: JupyterServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    return magics_shell(server.port, TOKENS["alice"], monkeypatch, tmp_path)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:  # 127.0.0.1 only
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_gpufeed_makes_rotates_and_turns_off_the_feed(shell: Any) -> None:
    first = shell.run_line_magic("gpufeed", "")
    assert "no calendar feed yet" in repr(first)
    made = shell.run_line_magic("gpufeed", "--new")
    url = made["url"]
    assert url.startswith("http://127.0.0.1:") and url in repr(made)
    status, text = get(url)
    assert status == 200 and text.startswith("BEGIN:VCALENDAR\r\n")
    again = shell.run_line_magic("gpufeed", "--new")
    assert get(url)[0] == 404 and get(again["url"])[0] == 200
    shown = shell.run_line_magic("gpufeed", "")
    assert again["url"][-8:-4] in repr(shown) and again["url"] not in repr(shown)
    assert "<div class='gpuhive-notice'>" in shown._repr_html_()
    off = shell.run_line_magic("gpufeed", "--off")
    assert "off" in repr(off) and get(again["url"])[0] == 404
    with pytest.raises(UsageError, match="no calendar feed"):
        shell.run_line_magic("gpufeed", "--off")


def test_gpureserve_notify_books_when_free_and_subscribes_when_not(
    shell: Any, server: JupyterServer
) -> None:
    bob = Client(server.port, TOKENS["bob"])
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    status, held, _ = bob.call(
        "POST", "reservations",
        {"title": "all of gpu3", "gpus": [f"gpu3:{i}" for i in range(4)], "start": now,
         "duration": "3h"},
    )  # fmt: skip
    assert status == 201, held
    # Without --before: GPUs free from now on. The free slot after bob's booking (in 3 h) is
    # not "free now", so nothing fires before he leaves (with the booking horizon as the
    # deadline, it used to fire at once with that later slot).
    notice = shell.run_line_magic("gpureserve", "2 --host gpu3 --for 4h --notify --no-pin")
    text = repr(notice)
    assert text.startswith("Not booked now:") and "gpu3" in text
    assert f"subscription {notice['id']}" in text and "watches for 24 hours" in text
    assert "when 2 GPUs on gpu3 are free for" in text and "GPU(s)" not in text
    assert "by a JupyterLab notice)" in text  # no mail, no webhook here: the Lab alone
    alice = Client(server.port, TOKENS["alice"])
    status, sub, _ = alice.call("GET", f"subscriptions/{notice['id']}")
    assert status == 200 and sub["gpus"] == 2 and sub["host"] == "gpu3"
    assert sub["duration_s"] == 4 * 3600 and sub["active"] and sub["starts_now"]
    watch = datetime.fromisoformat(sub["deadline"]) - datetime.fromisoformat(sub["created_at"])
    assert watch == timedelta(hours=24)
    time.sleep(0.5)  # the check that follows a new subscription has run
    assert alice.call("GET", f"subscriptions/{notice['id']}")[1]["fired"] == 0
    # free GPUs are simply booked
    done = shell.run_line_magic("gpureserve", "gpu2:0,1 --for 30m --notify --no-pin")
    assert done["gpus"] == ["gpu2:0", "gpu2:1"] and done["owner"] == "alice"
    with pytest.raises(UsageError, match="one host"):
        shell.run_line_magic("gpureserve", "gpu3:0 gpu1:0 --for 30m --notify --no-pin")
    # bob ends his booking: the subscription fires (once) with the slot alice asked for
    assert bob.call("DELETE", f"reservations/{held['id']}")[0] == 200

    def fired() -> Any:
        sub = alice.call("GET", f"subscriptions/{notice['id']}")[1]
        return sub if sub["fired"] else None

    sub = wait_for(fired, 10, "the subscription to fire", interval=0.1)
    assert sub["offer"]["gpus"] == ["gpu3:0", "gpu3:1"] and not sub["active"]
    offered = datetime.fromisoformat(sub["offer"]["start"])
    assert abs(offered - datetime.now(timezone.utc)) < timedelta(minutes=1)  # free now
