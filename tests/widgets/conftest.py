"""A real gpuhive server (64 declared GPUs, no monitoring) per widget test module.

Each module gets a fresh server and database, so bookings of one module can never meet another's
(they used to share one server, and whether two of them collided depended on the date).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest

from jupyter_gpuhive.notebook.client import HiveClient
from tests.conftest import TOKENS, USERS
from tests.support.server import JupyterServer

UTC_NAME = "UTC"
HOSTS = [
    {"name": f"gpu{h:02d}", "address": "127.0.0.1", "transport": "local", "gpu_count": 4,
     "gpu_model": "Simulated A100"}
    for h in range(1, 17)
]  # fmt: skip
OFFICE = {"days": ["mon-fri"], "start": "08:00", "end": "16:00"}


def next_monday(weeks: int = 1) -> date:
    """A UTC Monday at least two days ahead (so every hour of that week is in the future)."""
    today = datetime.now(timezone.utc).date()
    ahead = (7 - today.weekday()) % 7
    if ahead < 2:
        ahead += 7
    return today + timedelta(days=ahead + 7 * (weeks - 1))


@pytest.fixture(scope="module")
def hive_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    db = tmp_path_factory.mktemp("widgets") / "hive.sqlite"
    config = {
        "db_url": f"sqlite:///{db}",
        "hosts": HOSTS,
        "monitor": False,
        "admin_groups": ["admins"],
        "site_timezone": UTC_NAME,
        "min_reservation": "10m",
        "max_reservation": "3d",
        "booking_horizon": "60d",
    }
    server = JupyterServer(config, USERS)
    boss = HiveClient(f"http://127.0.0.1:{server.port}/", TOKENS["boss"])
    # gpu01 may be booked in office hours only; every other host at any time.
    boss.request("POST", "rules", {"name": "gpu01 office", "users": ["*"], "hosts": ["gpu01"],
                                   "windows": [OFFICE]})  # fmt: skip
    others = [h["name"] for h in HOSTS[1:]]
    boss.request("POST", "rules", {"name": "rest", "users": ["*"], "hosts": others})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(hive_server: JupyterServer) -> str:
    return f"http://127.0.0.1:{hive_server.port}/"


@pytest.fixture(scope="module")
def as_user(url: str) -> Any:
    def make(name: str) -> HiveClient:
        return HiveClient(url, TOKENS[name])

    return make
