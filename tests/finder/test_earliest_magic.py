"""%gpureserve --earliest in a real IPython shell against a real server (own process)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from tests.support.server import Client, JupyterServer, magics_shell

USERS = {"tok-ann": {"name": "ann"}, "tok-ben": {"name": "ben"}}
HOSTS = [{"name": "m1", "address": "127.0.0.1", "transport": "local", "gpu_count": 4,
          "gpu_model": "Simulated A100"}]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    root = tmp_path_factory.mktemp("earliest")
    config = {"db_url": f"sqlite:///{root / 'hive.sqlite'}", "hosts": HOSTS, "monitor": False,
              "min_reservation": "1m", "site_timezone": "UTC"}  # fmt: skip
    srv = JupyterServer(config, USERS)
    yield srv
    srv.stop()


@pytest.fixture
def shell(server: JupyterServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    return magics_shell(server.port, "tok-ann", monkeypatch, tmp_path)


def iso(instant: datetime) -> str:
    return instant.isoformat()


def test_earliest_shows_and_books_the_first_slot(shell: Any, server: JupyterServer) -> None:
    ben = Client(server.port, "tok-ben")
    start = (datetime.now(UTC) + timedelta(days=3)).replace(minute=0, second=0, microsecond=0)
    status, held, _ = ben.call("POST", "reservations", {"title": "ben's", "gpus": ["m1:0", "m1:1"],
                                                       "start": iso(start), "duration": "2h"})  # fmt: skip
    assert status == 201, held
    shown = shell.run_line_magic("gpureserve", f"3 --for 1h --earliest --start {iso(start)}")
    assert datetime.fromisoformat(shown[0]["start"]) == start + timedelta(hours=2)
    assert shown[0]["gpus"] == ["m1:0", "m1:1", "m1:2"]
    assert "m1:0, m1:1, m1:2" in shown.text()
    done = shell.run_line_magic(
        "gpureserve", f"3 --for 1h --earliest --start {iso(start)} --book --no-pin"
    )
    assert done["gpus"] == ["m1:0", "m1:1", "m1:2"]
    assert datetime.fromisoformat(done["start"]) == start + timedelta(hours=2)
    assert "earliest slot" in done.headline
    shell.run_line_magic("gpureserve", f"--cancel {done['id']}")
    ben.call("DELETE", f"reservations/{held['id']}")


def test_earliest_refusals(shell: Any) -> None:
    with pytest.raises(UsageError, match=r"NVLink|nvlink|No slot"):
        shell.run_line_magic("gpureserve", "2 --for 1h --earliest --nvlink")  # no topology
    with pytest.raises(UsageError, match="one host"):
        shell.run_line_magic("gpureserve", "m1:0 m2:1 --for 1h --earliest")
    with pytest.raises(UsageError, match="duration"):
        shell.run_line_magic("gpureserve", "2 --for 30s --earliest")


def test_wait_says_when_it_will_probably_end(shell: Any, server: JupyterServer) -> None:
    ben = Client(server.port, "tok-ben")
    now = datetime.now(UTC)
    status, held, _ = ben.call("POST", "reservations", {"title": "ben's", "gpus": ["m1:3"],
                                                       "start": iso(now), "duration": "1h"})  # fmt: skip
    assert status == 201, held
    with capture_output() as out, pytest.raises(UsageError):
        shell.run_line_magic("gpureserve", "m1:3 --for 10m --wait --timeout 3s --no-pin")
    assert "the wait will probably end then" in out.stdout
    assert "m1:3" in out.stdout
    ben.call("DELETE", f"reservations/{held['id']}")
    time.sleep(0.1)


def test_earliest_with_slices_or_uuids_says_how_to_ask(shell: Any) -> None:
    # Before: int("0/mig5") raised ValueError (and a MIG UUID an IndexError), also under --wait.
    for named in ("m1:0/mig5", "m1:0/mig5.1", "MIG-4f7c1f9e-0000-0000-0000-000000000000",
                  "m1:0 m1:1/mig3"):  # fmt: skip
        with pytest.raises(UsageError, match=r"--slices or --profile"):
            shell.run_line_magic("gpureserve", f"{named} --for 1h --earliest")


def test_parse_ref() -> None:
    from jupyter_gpuhive.model import UnitRef, parse_ref

    assert parse_ref("gpu1:0") == UnitRef("gpu1", 0)
    assert parse_ref("gpu1:3/mig5") == UnitRef("gpu1", 3, 5, 0)
    assert parse_ref("gpu1:3/mig5.1") == UnitRef("gpu1", 3, 5, 1)
    assert parse_ref("gpu1:3/mig5").is_slice and not parse_ref("gpu1:3").is_slice  # type: ignore[union-attr]
    for other in ("MIG-abc", "GPU-abc", "gpu1", "gpu1:x", "gpu1:0/gi5", ":0"):
        assert parse_ref(other) is None
