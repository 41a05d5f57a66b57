"""The accounting report against a hand-built fixture: reservations across a month's end,
charges of every kind, groups, hosts, the cross-check, CSV and `jupyter gpuhive report`."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.bookings.accounting import to_csv
from jupyter_gpuhive.bookings.fairshare import FairShare, FairShareSettings, no_reflag
from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity
from jupyter_gpuhive.monitor.accounting import month_of
from jupyter_gpuhive.privacy import Privacy
from jupyter_gpuhive.store import Changes, Store
from jupyter_gpuhive.store.accounting import Charge

ZONE = ZoneInfo("Europe/Warsaw")
GROUPS = {"alice": {"phd"}, "bob": {"phd", "staff"}}
NOVEMBER = date(2026, 11, 1)


def local(day: int, hour: int, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=ZONE)


def charge(gpu: int, at: datetime, payer: str, kind: str, **figures: float) -> Charge:
    hour = at.astimezone(ZoneInfo("UTC")).replace(minute=0, second=0, microsecond=0)
    return Charge(gpu, hour, month_of(hour, ZONE), payer, kind, **figures)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url).open()
    s.inventory.sync([
        HostDecl("h1", gpus=(GpuDecl(0, "GPU-h1-0"), GpuDecl(1, "GPU-h1-1"))),
        HostDecl("h2", gpus=(GpuDecl(0, "GPU-h2-0"),)),
    ])  # fmt: skip
    gpu = {ref: s.inventory.gpu(ref).id for ref in ("h1:0", "h1:1", "h2:0")}  # type: ignore[union-attr]
    r = s.reservations
    r.create("alice", "a", "", local(10, 8), local(10, 12), [gpu["h1:0"]])  # 4 GPU-h
    r.create("bob", "b", "", local(30, 22), local(1, 2, 12), [gpu["h1:1"], gpu["h2:0"]])
    gone = r.create("carol", "c", "", local(12, 8), local(12, 9), [gpu["h2:0"]])
    r.modify(gone.id, lambda _old: Changes(cancelled_at=local(1, 0)))
    s.accounting.record([
        charge(gpu["h1:0"], local(10, 9), "alice", "reserved", seconds=3600,
               used_seconds=1800, util_seconds=900, energy_j=720_000),
        charge(gpu["h2:0"], local(20, 3), "bob", "queued", seconds=3600, used_seconds=3600,
               util_seconds=3600, energy_j=1_080_000),
        charge(gpu["h1:1"], local(15, 5), "", "idle", seconds=3600, energy_j=360_000),
        charge(gpu["h2:0"], local(1, 5, 12), "carol", "unreserved", seconds=3600,
               used_seconds=3600, energy_j=500_000),
    ])  # fmt: skip
    yield s
    s.close()


def fairshare(store: Store) -> FairShare:
    async def run(fn: Any, *args: Any) -> Any:
        return fn(*args)

    def identity_of(name: str) -> Identity:
        return Identity(name, frozenset(GROUPS.get(name, ())))

    return FairShare(
        store, run, FairShareSettings(), ZONE, identity_of, Privacy(), reflag=no_reflag
    )


# The report of November 2026 by hand: (scope, name) -> reserved, used, queued, kWh, measured.
EXPECTED = {
    ("site", None): (8, 1.5, 1, 0.6, 3),
    ("user", "alice"): (4, 0.5, 0, 0.2, 1),
    ("user", "bob"): (4, 1, 1, 0.3, 1),  # 2 h × 2 GPUs before midnight on Nov 30
    ("user", None): (0, 0, 0, 0.1, 1),  # the idle GPU nobody held
    ("group", "phd"): (8, 1.5, 1, 0.5, 2),
    ("group", "staff"): (4, 1, 1, 0.3, 1),
    ("host", "h1"): (6, 0.5, 0, 0.3, 2),
    ("host", "h2"): (2, 1, 1, 0.3, 1),
}


def test_report_matches_the_hand_built_fixture(store: Store) -> None:
    data = fairshare(store).compute_report([NOVEMBER])
    assert data["months"] == ["2026-11"] and data["timezone"] == "Europe/Warsaw"
    found = {
        (r["scope"], r["name"]): (r["reserved_gpu_hours"], r["used_gpu_hours"],
                                  r["queued_gpu_hours"], r["energy_kwh"], r["measured_gpu_hours"])
        for r in data["rows"]
    }  # fmt: skip
    assert found == {k: tuple(float(x) for x in v) for k, v in EXPECTED.items()}
    assert data["check"] == {"users_add_up": True, "hosts_add_up": True, "largest_difference": 0}

    december = fairshare(store).compute_report([date(2026, 12, 1)])
    rows = {(r["scope"], r["name"]): r for r in december["rows"]}
    assert rows[("user", "bob")]["reserved_gpu_hours"] == 4  # the other half
    assert rows[("user", "carol")]["used_gpu_hours"] == 1
    assert ("user", "alice") not in rows

    table = list(csv.reader(io.StringIO(to_csv(data))))
    assert table[0][:3] == ["month", "scope", "name"]
    assert ["2026-11", "user", "(nobody)", "0.0", "0.0", "0.0", "0.1", "1.0"] in table


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_report_as_a_user_sees_it_and_bad_months(store: Store) -> None:
    share = fairshare(store)
    alice = Identity("alice", frozenset({"phd"}))
    data = asyncio.run(share.report(alice, NOVEMBER, None))
    shown = {(r["scope"], r["name"]) for r in data["rows"]}
    assert shown == {("site", None), ("user", "alice"), ("group", "phd"), ("host", "h1"),
                     ("host", "h2")}  # fmt: skip
    with pytest.raises(Invalid, match="at most 24 months"):
        asyncio.run(share.report(alice, date(2024, 1, 1), date(2026, 11, 1)))
    with pytest.raises(Invalid, match="must not be before"):
        asyncio.run(share.report(alice, NOVEMBER, date(2026, 10, 1)))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_cli_report_prints_tables_and_csv(store: Store, db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "jupyter_server_config.json"
    config.write_text(json.dumps({"GpuHiveApp": {
        "db_url": db_url, "site_timezone": "Europe/Warsaw", "auto_local_host": False,
        "hosts": [{"name": "h1", "transport": "local"}, {"name": "h2", "transport": "local"}],
        "groups": {"phd": ["alice", "bob"], "staff": ["bob"]}}}))  # fmt: skip
    env = {"JUPYTER_CONFIG_DIR": str(tmp_path), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # fmt: skip
    cli = [sys.executable, "-m", "jupyter_gpuhive.cli.main", "report", "--month", "2026-11"]
    text = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert "Accounting 2026-11 (Europe/Warsaw)" in text.stdout
    assert "users add up to the site: yes; hosts: yes" in text.stdout
    line = next(x for x in text.stdout.splitlines() if x.startswith("user    bob"))
    assert line.split()[2:] == ["4.00", "1.00", "1.00", "0.30", "1.00"]
    out = subprocess.run([*cli, "--csv"], env=env, capture_output=True, text=True, timeout=120,
                         check=True)  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    site = next(r for r in rows if r["scope"] == "site")
    assert float(site["energy_kwh"]) == pytest.approx(0.6)
    users = [r for r in rows if r["scope"] == "user"]
    assert sum(float(r["energy_kwh"]) for r in users) == pytest.approx(0.6)
