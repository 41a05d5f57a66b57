"""A gpuhive server of 64 declared GPUs (16 hosts x 4) with a crowded week, for calendar.spec.ts.

`calendar_hive.py OUT.json` starts it (tests/support/server.py: real jupyter_server, SQLite),
books back-to-back reservations of mixed lengths and titles on every GPU from today's UTC
midnight for a week, drains gpu03:1 (boss, an admin), writes {"url", "token"} to OUT.json and
runs until SIGTERM. The Lab's kernel then draws this server's calendar at 12 and 64 GPUs.
"""

from __future__ import annotations

import itertools
import json
import signal
import sys
import tempfile
from datetime import datetime, time, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from jupyter_gpuhive.notebook.client import HiveClient  # noqa: E402
from tests.conftest import TOKENS, USERS  # noqa: E402
from tests.support.server import JupyterServer  # noqa: E402

HOSTS = [{"name": f"gpu{h:02d}", "address": "127.0.0.1", "transport": "local", "gpu_count": 4,
          "gpu_model": "Simulated A100"} for h in range(1, 17)]  # fmt: skip
TITLES = ["ablation", "WWWW wide capitals", "x", "llama fine-tune, 70B", "bobbob", "eval sweep"]
HOURS = [0.25, 1, 3, 6, 10, 16, 30]


def seed(url: str) -> None:
    """Back-to-back bookings on every GPU, alternating users, over the week from today."""
    start = datetime.combine(datetime.now(timezone.utc).date(), time(), tzinfo=timezone.utc)
    now = datetime.now(timezone.utc) + timedelta(minutes=5)
    users = itertools.cycle([HiveClient(url, TOKENS[u]) for u in ("alice", "bob", "carol")])
    hours, titles = itertools.cycle(HOURS), itertools.cycle(TITLES)
    for n, gpu in enumerate(f"{h['name']}:{i}" for h in HOSTS for i in range(4)):
        at = max(start + timedelta(hours=n % 7), now)
        while at < start + timedelta(days=7):
            end = at + timedelta(hours=next(hours))
            next(users).request("POST", "reservations", body={
                "title": next(titles), "gpus": [gpu], "start": at.isoformat(),
                "end": end.isoformat()})  # fmt: skip
            at = end


def main() -> None:
    config = {
        "db_url": f"sqlite:///{tempfile.mkdtemp(prefix='gpuhive-ui-calendar-')}/hive.sqlite",
        "hosts": HOSTS, "monitor": False, "admin_groups": ["admins"], "site_timezone": "UTC",
        "min_reservation": "10m", "max_reservation": "3d", "booking_horizon": "30d",
    }  # fmt: skip
    server = JupyterServer(config, USERS)
    url = f"http://127.0.0.1:{server.port}/"
    seed(url)
    HiveClient(url, TOKENS["boss"]).request(
        "POST", "health/drain", body={"gpu": "gpu03:1", "reason": "fan"}
    )
    Path(sys.argv[1]).write_text(json.dumps({"url": url, "token": TOKENS["alice"]}))
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
    signal.pause()


if __name__ == "__main__":
    main()
