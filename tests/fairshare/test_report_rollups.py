"""The accounting report from its roll-ups equals a computation from scratch (every
reservation and every charge), over random data, before and after changes to months that
were already rolled up: a cancellation, an edit, a late booking and late charges."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from jupyter_gpuhive.bookings import accounting
from jupyter_gpuhive.bookings.fairshare import FairShare, FairShareSettings, no_reflag
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity
from jupyter_gpuhive.monitor.accounting import month_of
from jupyter_gpuhive.privacy import Privacy
from jupyter_gpuhive.store import Changes, Store
from jupyter_gpuhive.store.accounting import KINDS, QUEUED, Charge
from jupyter_gpuhive.store.schema import gpu_charges_hourly, reserved_monthly

ZONE = ZoneInfo("Europe/Warsaw")
UTC = ZoneInfo("UTC")
MONTHS = [date(2031, 1, 1), date(2031, 2, 1), date(2031, 3, 1)]  # the store has no horizon
NOW = datetime(2031, 3, 15, 12, tzinfo=ZONE)  # January and February have ended; March not
USERS = ("ann", "ben", "cyd", "dee")
GROUPS = {"ann": {"lab"}, "ben": {"lab", "ops"}, "cyd": set(), "dee": {"ops"}}
HOSTS = {"h1": 2, "h2": 2, "h3": 1, "h4": 2}  # h4: the fixed reservations below
COLUMNS = accounting.COLUMNS
Table = dict[tuple[str, str, str | None], tuple[float, ...]]


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url).open()
    s.inventory.sync([
        HostDecl(name, gpus=tuple(GpuDecl(i, f"GPU-{name}-{i}") for i in range(n)))
        for name, n in HOSTS.items()
    ])  # fmt: skip
    yield s
    s.close()


def host_of(store: Store) -> dict[int, str]:
    """GPU id -> host name."""
    return {g.id: g.host for g in store.inventory.gpus()}


def fairshare(store: Store) -> FairShare:
    async def run(fn: Any, *args: Any) -> Any:
        return fn(*args)

    def identity_of(name: str) -> Identity:
        return Identity(name, frozenset(GROUPS.get(name, ())))

    return FairShare(store, run, FairShareSettings(), ZONE, identity_of, Privacy(),
                     reflag=no_reflag, clock=lambda: NOW)  # fmt: skip


def book_randomly(store: Store, rng: random.Random) -> None:
    """Reservations one after another on each GPU but h4's from late December to April,
    1 to 60 hours each (many across a month's end), a tenth of them cancelled."""
    for gpu, host in host_of(store).items():
        if host == "h4":
            continue
        cursor = datetime(2030, 12, 28, tzinfo=ZONE)
        while cursor < datetime(2031, 4, 3, tzinfo=ZONE):
            cursor += timedelta(hours=rng.randint(0, 30), minutes=rng.choice((0, 15, 40)))
            end = cursor + timedelta(hours=rng.randint(1, 60), minutes=rng.choice((0, 30)))
            made = store.reservations.create(rng.choice(USERS), "r", "", cursor, end, [gpu])
            if rng.random() < 0.1:
                store.reservations.modify(made.id, lambda _: Changes(cancelled_at=NOW))
            cursor = end


def charge_randomly(store: Store, rng: random.Random, count: int) -> None:
    """`count` random charges over the three months and a little around them, written in
    small batches as sweeps write them."""
    ids = list(host_of(store))
    charges = []
    for _ in range(count):
        at = datetime(2030, 12, 30, tzinfo=UTC) + timedelta(hours=rng.randrange(95 * 24))
        kind = rng.choice(KINDS)
        payer = "" if kind == "idle" else rng.choice(USERS)
        seconds = rng.uniform(60, 3600)
        used = 0.0 if kind == "idle" else rng.uniform(0, seconds)
        charges.append(Charge(rng.choice(ids), at, month_of(at, ZONE), payer, kind,
                              seconds=seconds, used_seconds=used, util_seconds=used / 2,
                              energy_j=rng.uniform(0, 1e6)))  # fmt: skip
    for i in range(0, len(charges), 97):
        store.accounting.record(charges[i : i + 97])


def from_scratch(store: Store) -> Table:
    """The report computed in Python from every reservation and every hourly charge."""
    hosts = host_of(store)
    table: dict[tuple[str, str, str | None], list[float]] = {}

    def add(month: str, user: str, host: str, values: dict[str, float]) -> None:
        keys = [("site", None), ("user", user or None), ("host", host)]
        keys += [("group", g) for g in GROUPS.get(user, ())]
        for scope, name in keys:
            into = table.setdefault((month, scope, name), [0.0] * len(COLUMNS))
            for i, column in enumerate(COLUMNS):
                into[i] += values.get(column, 0.0)

    spans = {m.strftime("%Y-%m"): (accounting.month_start(m, ZONE),
                                   accounting.month_start(accounting.next_month(m), ZONE))
             for m in MONTHS}  # fmt: skip
    for r in store.reservations.window(datetime(2030, 1, 1, tzinfo=UTC),
                                       datetime(2032, 1, 1, tzinfo=UTC)):  # fmt: skip
        for label, (a, b) in spans.items():
            hours = accounting.overlap_hours(r.start, r.end, a, b)
            for gpu in r.gpus:
                if hours:
                    add(label, r.owner, hosts[gpu.id], {"reserved_gpu_hours": hours})
    with store.db.read() as conn:
        rows = conn.execute(select(gpu_charges_hourly)).all()
    for row in rows:
        label = row.hour.astimezone(ZONE).strftime("%Y-%m")
        if label in spans:
            used = row.used_seconds / 3600
            add(label, row.payer, hosts[row.gpu_id], {
                "used_gpu_hours": used, "queued_gpu_hours": used if row.kind == QUEUED else 0.0,
                "energy_kwh": row.energy_j / 3.6e6, "measured_gpu_hours": row.seconds / 3600,
            })  # fmt: skip
    return {k: tuple(v) for k, v in table.items()}


def from_report(data: dict[str, Any]) -> Table:
    return {(r["month"], r["scope"], r["name"]): tuple(r[c] for c in COLUMNS)
            for r in data["rows"]}  # fmt: skip


def assert_same(found: Table, expected: Table) -> None:
    """Every row and figure alike (to the report's rounding)."""
    assert found.keys() == expected.keys()
    for key, values in expected.items():
        assert found[key] == pytest.approx(values, abs=2e-4), key


def kept_months(store: Store) -> set[str]:
    """Months whose booked hours the roll-up holds (their marker rows)."""
    m = reserved_monthly.c
    with store.db.read() as conn:
        starts = conn.execute(select(m.start_at).where(m.owner == "", m.host_id == 0)).scalars()
        return {s.astimezone(ZONE).strftime("%Y-%m") for s in starts}


def test_the_rolled_up_report_equals_one_from_scratch(store: Store) -> None:
    rng = random.Random(2031)
    book_randomly(store, rng)
    charge_randomly(store, rng, 1500)
    h4 = [gid for gid, host in host_of(store).items() if host == "h4"]
    across = store.reservations.create(  # 2 h in January and 3 h in February, on 2 GPUs
        "ann", "across", "", datetime(2031, 1, 31, 22, tzinfo=ZONE),
        datetime(2031, 2, 1, 3, tzinfo=ZONE), h4,
    )  # fmt: skip
    store.reservations.create(  # from an ended month into the one in progress
        "dee", "into March", "", datetime(2031, 2, 27, tzinfo=ZONE),
        datetime(2031, 3, 2, 6, tzinfo=ZONE), h4[:1],
    )  # fmt: skip
    share = fairshare(store)

    first = share.compute_report(MONTHS)
    assert_same(from_report(first), from_scratch(store))
    assert first["check"]["users_add_up"] and first["check"]["hosts_add_up"]
    assert kept_months(store) == {"2031-01", "2031-02"}  # ended months only
    assert from_report(share.compute_report(MONTHS)) == from_report(first)  # read back

    # Changes to months already rolled up: each drops the months it touches.
    store.reservations.modify(across.id, lambda _: Changes(cancelled_at=NOW))
    assert kept_months(store) == set()
    share.compute_report(MONTHS)
    january = next(r for r in store.reservations.window(
        datetime(2031, 1, 5, tzinfo=ZONE), datetime(2031, 1, 20, tzinfo=ZONE)))  # fmt: skip
    store.reservations.modify(january.id, lambda old: Changes(end=old.end - timedelta(hours=1)))
    assert kept_months(store) == {"2031-02"}
    store.reservations.create("cyd", "late", "", datetime(2031, 1, 10, tzinfo=ZONE),
                              datetime(2031, 1, 10, 7, tzinfo=ZONE), h4)  # fmt: skip
    late = datetime(2031, 1, 20, 5, tzinfo=UTC)
    store.accounting.record([Charge(h4[0], late, month_of(late, ZONE), "cyd", QUEUED,
                                    seconds=600, used_seconds=600, energy_j=9e4)])  # fmt: skip

    second = share.compute_report(MONTHS)
    assert_same(from_report(second), from_scratch(store))
    assert kept_months(store) == {"2031-01", "2031-02"}
    before, after = from_report(first), from_report(second)
    assert after[("2031-02", "user", "ann")][0] == pytest.approx(
        before[("2031-02", "user", "ann")][0] - 6,
        abs=2e-4,  # the cancelled 3 h × 2 GPUs
    )
    assert after[("2031-01", "user", "cyd")][2] == pytest.approx(
        before[("2031-01", "user", "cyd")][2] + 600 / 3600, abs=2e-4
    )
