"""`jupyter gpuhive migrate`: a personal SQLite store moves into PostgreSQL intact."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from jupyter_gpuhive.bookings.access import parse_rule
from jupyter_gpuhive.cli.migrate import MigrationError, migrate
from jupyter_gpuhive.errors import Conflict
from jupyter_gpuhive.hive import Hive
from jupyter_gpuhive.model import Identity
from jupyter_gpuhive.model.requests import Booking
from jupyter_gpuhive.server.app import GpuHiveApp
from tests.conftest import soon
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import HOSTS

ALICE = Identity("alice", frozenset({"phd"}), False)
BOSS = Identity("boss", frozenset({"admins"}), True)


def hive_on(url: str) -> Hive:
    app = GpuHiveApp(db_url=url, hosts=HOSTS, monitor=False, site_timezone="Europe/Warsaw")
    return Hive(app.settings_for_hive(), publish=lambda _data: None).open()


def booking(gpu: str, hours: int) -> Booking:
    start = soon(hours=hours, days=2)
    return Booking(f"on {gpu}", (gpu,), start, start + timedelta(hours=1))


def _plain(value: Any) -> str:
    """SQLite keeps instants as text and booleans as 0/1: compare what both mean."""
    return str(int(value)) if isinstance(value, bool) else str(value)[:19]


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_engine(url)
    queries = {
        "reservations": "SELECT id, owner, title, start_at, end_at, cancelled_at IS NOT NULL "
        "FROM reservations ORDER BY id",
        "reservation_gpus": "SELECT reservation_id, gpu_id, cancelled FROM reservation_gpus "
        "ORDER BY 1, 2",
        "gpus": "SELECT id, host_id, idx, uuid FROM gpus ORDER BY id",
        "rules": "SELECT id, name, created_by FROM rules ORDER BY id",
        "users": "SELECT name FROM users ORDER BY name",
        "user_groups": "SELECT user_name, group_name FROM user_groups ORDER BY 1, 2",
    }
    try:
        with engine.connect() as conn:
            out = {}
            for name, sql in queries.items():
                rows = conn.execute(text(sql)).all()
                out[name] = [tuple(_plain(v) for v in row) for row in rows]
            return out
    finally:
        engine.dispose()


def test_migrate_sqlite_into_postgresql(tmp_path: Path, postgres: PostgresCluster) -> None:
    source = f"sqlite:///{tmp_path / 'gpuhive.sqlite'}"
    personal = hive_on(source)
    try:
        personal.store.users.touch(ALICE)
        personal.store.users.touch(BOSS)
        kept = personal.bookings.reservations.create(ALICE, booking("gpu1:0", 0))
        personal.bookings.reservations.create(ALICE, booking("gpu2:1", 3))
        gone = personal.bookings.reservations.create(BOSS, booking("gpu1:0", 5))
        personal.bookings.reservations.cancel(BOSS, gone.id)
        personal.store.rules.add(parse_rule({"name": "phd nights", "groups": ["phd"]}), "boss")
        # The newest rule is deleted: its id was handed out and must never come back.
        dropped = personal.store.rules.add(
            parse_rule({"name": "short-lived", "users": ["*"]}), "boss"
        )
        personal.store.rules.remove(dropped.id)
    finally:
        personal.close()
    before = dump(source)
    target = postgres.new_database()
    cli = [sys.executable, "-m", "jupyter_gpuhive.cli.main", "migrate", f"--from={source}"]
    done = subprocess.run([*cli, f"--to={target}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Copied" in done.stdout

    assert dump(target) == before
    team = hive_on(target)  # the service opening the migrated store
    try:
        assert team.store.reservations.get(kept.id).owner == "alice"
        # A slot taken in personal mode stays taken (the exclusion constraint sees it) ...
        with pytest.raises(Conflict):
            team.bookings.reservations.create(BOSS, booking("gpu1:0", 0))
        # ... and new rows get new ids (the sequences moved past the copied ones).
        fresh = team.bookings.reservations.create(BOSS, booking("gpu3:3", 1))
        assert fresh.id > gone.id
        # ... also past ids deleted in personal mode (SQLite's AUTOINCREMENT counter).
        rule = team.store.rules.add(parse_rule({"name": "after the move", "users": ["*"]}), "boss")
        assert rule.id > dropped.id
    finally:
        team.close()

    # A target that already holds data is refused, and left as it was.
    with pytest.raises(MigrationError, match="already holds data"):
        migrate(source, target, say=lambda _line: None)
    assert len(dump(target)["reservations"]) == len(before["reservations"]) + 1
