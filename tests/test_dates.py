"""The harness of `make test-dates` (tests/dates.py): its instants, and a faked clock that reaches
child processes (PostgreSQL included) while sleeps, waits and timeouts keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import psycopg

from tests.dates import SITE_ZONE, faked_env, instants, offset_changes, real_now
from tests.support.postgres import PostgresCluster

UTC = timezone.utc
WARSAW = ZoneInfo(SITE_ZONE)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_instants_are_computed_from_the_clock_and_the_zone() -> None:
    now = utc(2026, 11, 24, 4, 9, 30)  # a Tuesday
    made = instants(now, WARSAW)
    found = [(i.at, i.why) for i in made]
    # PostgreSQL (in the site zone) at the changes and today; SQLite alone at the others.
    assert [i.why for i in made if i.postgresql] == [
        "today (the real clock)",
        "one hour before summer time begins",
        "one hour after summer time begins",
        "one hour before summer time ends",
        "one hour after summer time ends",
    ]
    assert found == [
        (now, "today (the real clock)"),
        (utc(2026, 11, 29, 22, 30), "a Sunday 23:30"),  # 23:30 CET
        (utc(2026, 12, 31, 22, 59), "23:59 on 31 December"),
        (utc(2027, 3, 26, 23, 0), "26 hours before summer time begins"),
        (utc(2027, 3, 28, 0, 0), "one hour before summer time begins"),  # 01:00 CET
        (utc(2027, 3, 28, 2, 0), "one hour after summer time begins"),  # 04:00 CEST
        (utc(2027, 10, 29, 23, 0), "26 hours before summer time ends"),
        (utc(2027, 10, 31, 0, 0), "one hour before summer time ends"),  # 02:00 CEST
        (utc(2027, 10, 31, 2, 0), "one hour after summer time ends"),  # 03:00 CET
        (utc(2028, 2, 29, 11, 0), "29 February"),  # 12:00 CET
    ]


def test_instants_move_on_with_the_calendar() -> None:
    # Just after a leap day: the next one is four years on; on a Sunday night past 23:30, the
    # next Sunday; in the last minute of a year, the next year's 31 December.
    late = utc(2028, 12, 31, 22, 59, 30)  # Sun 23:59:30 CET
    by_why = {i.why: i.at for i in instants(late, WARSAW)}
    assert by_why["29 February"] == utc(2032, 2, 29, 11, 0)
    assert by_why["a Sunday 23:30"] == utc(2029, 1, 7, 22, 30)
    assert by_why["23:59 on 31 December"] == utc(2029, 12, 31, 22, 59)
    assert by_why["one hour before summer time begins"] == utc(2029, 3, 25, 0, 0)
    # A zone without DST has no such instants; the others stay.
    tokyo = [i.why for i in instants(late, ZoneInfo("Asia/Tokyo"))]
    assert not any("summer" in why for why in tokyo) and len(tokyo) == 4


def test_offset_changes_are_found_to_the_second() -> None:
    assert offset_changes(WARSAW, utc(2027, 1, 1), utc(2028, 1, 1)) == [
        utc(2027, 3, 28, 1, 0),
        utc(2027, 10, 31, 1, 0),
    ]
    assert offset_changes(ZoneInfo("Australia/Lord_Howe"), utc(2027, 3, 1), utc(2027, 5, 1)) == [
        utc(2027, 4, 3, 15, 0)  # a half-hour change: 02:00 LHDT becomes 01:30 LHST
    ]


CHILD = """
import asyncio, json, threading, time
from datetime import datetime, timezone
t0 = time.monotonic()
time.sleep(0.2)
threading.Event().wait(0.2)
async def timeout():
    try:
        await asyncio.wait_for(asyncio.sleep(5), 0.2)
    except TimeoutError:
        return True
    return False
timed_out = asyncio.run(timeout())
waited = time.monotonic() - t0
from concurrent.futures import ThreadPoolExecutor
t1 = time.monotonic()
with ThreadPoolExecutor(2) as pool:
    for _ in range(2000):
        pool.submit(int).result()
print(json.dumps({"now": datetime.now(timezone.utc).isoformat(), "timed_out": timed_out,
                  "waited": waited, "handoffs": time.monotonic() - t1}))
"""


def test_faked_clock_reaches_children_and_waits_still_work() -> None:
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=123, hours=5)
    env = faked_env(at)
    child = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                           text=True, timeout=30)  # fmt: skip
    assert child.returncode == 0, child.stderr
    seen = __import__("json").loads(child.stdout)
    assert abs(datetime.fromisoformat(seen["now"]) - at) < timedelta(seconds=30)
    assert seen["timed_out"] is True
    assert 0.5 < seen["waited"] < 5  # sleep, Event.wait and wait_for waited for real
    # Handing work to threads stays fast (~0.1 s; with libfaketime's monotonic fix, ~30 s).
    assert seen["handoffs"] < 10
    # A program started through runuser (as PostgreSQL is) sees the same clock.
    command = ["date", "-u", "+%s"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "nobody", "--", *command]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert abs(datetime.fromtimestamp(int(out.stdout), UTC) - at) < timedelta(seconds=30)
    # Without libfaketime a program reads the real clock, which real_now() knows also when this
    # test itself runs under a faked clock (then faked_env above was relative to it as well).
    real = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "FAKETIME")}
    out = subprocess.run(
        ["date", "-u", "+%s"], env=real, capture_output=True, text=True, check=True
    )
    assert abs(datetime.fromtimestamp(int(out.stdout), UTC) - real_now()) < timedelta(seconds=30)


def test_postgres_shares_the_tests_clock(postgres: PostgresCluster) -> None:
    # Under `make test-dates` the cluster runs under the faked clock too (else this is trivial).
    with psycopg.connect(postgres.url().replace("postgresql+psycopg", "postgresql")) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    assert abs(row[0] - datetime.now(UTC)) < timedelta(seconds=10), row[0]
